"""The parent's shared memory: its pool's blocks, counted (block_refs), frontends gathering
a request's tensors straight into them (input_placer), giving memory back and what /dev/shm
has room for (shm_upkeep), and the regions clients registered, Triton's shared-memory
extensions (shared_memory). The pools and regions themselves are the top-level `shm`
package's.
"""
