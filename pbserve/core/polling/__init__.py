"""Polling instead of sleeping, where a wake-up would cost more than the poll: whether
the machine has CPU to spare for it (spare_cpu), and the parent's event loop turning on
for a while after a request (linger). The watch for a stub's reply is
StubProcess.watch_up; a stub's poll for an announced request is stub/stub.py."""
