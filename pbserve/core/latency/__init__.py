"""The latency machinery: polling instead of sleeping, where a wake-up would cost more
than the poll (docs/architecture.md, "Request path").

- `spare_cpu`: whether the machine has CPU to spare for polling (`MACHINE`), and one turn
  of a poll on the event loop (`idle_turn`);
- `hop`: an instance's hop and the tricks weighing it: the announcement, the watch for a
  reply, a batch queued ahead (`Hop`); how many instances of the server compute
  (`RunningInstances`);
- `linger`: the event loop turning on for a while after a request (`Linger`);
- `queue_watch`: a queue polled once a loop turn for a bounded time (`QueueWatch`: a
  stub's reply in the parent, the core's answer in a frontend process).

The hint that a request is coming, from the frontend down to the stub:

    frontend                 served.expect(), as soon as it knows the request's model
      |                      (server/http/infer.py, server/grpc/service.py)
    LoadedModel.expect       the handle the manager resolved for this request
      |
    Model.expect_request     only with none of its requests in flight and no cache
      |
    Scheduler.expect_request the idle instance `submit` would hand it to, if any
      |                      (none with a batcher or a queue; SequenceBatcher: never)
    Hop.announce             that instance's hop: not more often than EXPECT_EVERY_NS,
      |                      only while the CPU has time to spare
    StubProcess.announce     a wake-up on the stub's main queue, unless one waits there
      |
    stub/stub.py             `_expect_request`: the stub polls its queue for the request

An ensemble passes the hint on to its first steps' models (and, as a step ends, to the
next ones'): EnsembleModel.expect_request -> Model.expect_request. The other tricks hook
in at: `Scheduler.submit` -> ModelInstance.watch_for_reply -> `Hop.watch` ->
StubProcess.watch_up (the reply watch); ModelInstance.reply (after a CALL_DIRECT's answer,
the caller's next message is watched for); ModelInstance.can_queue_another ->
`Hop.may_queue_ahead`; ModelManager -> `Linger.after_request` after each request's final
response. The stub's side (polling for an announced request, for the next one, for a
BLS answer) is stub/stub.py and stub/direct_replies.py.
"""
