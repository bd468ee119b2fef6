"""Weight sync: how each policy update gets from the learner into the rollout engines.

Two ways, by `cluster.weight_sync`:

- over the actor bus ("file", and always with the embedded engine): the learner sends every
  rollout worker the policy as numbered `WeightUpdate` buckets, each one float32 buffer
  (`flat_codec.py`), and each worker stages them until their version's final one
  (`update_receiver.py`); a vLLM engine loads them in every worker from a safetensors file
  (`vllm_worker.WeightFileLoader`);
- by broadcast ("broadcast", vLLM engines): the learner is rank 0 of one gloo group whose other
  ranks are every engine's workers (`learner_group.py`: layout, rendezvous, each push); the bus
  carries only the manifest, and the tensors travel once, in byte buckets (`buckets.py`) over
  the group (`gloo_group.py`). On the engine side a rollout worker answers the learner's join
  and broadcast messages (`group_member.py`), its vLLM engine drives vLLM's weight-transfer
  session (`vllm_broadcast.py`), and each vLLM worker receives through `vllm_worker.py`'s
  transfer engine. `vllm_broadcast.py` also lets one process root a group over one engine.

The learner pushes with one class per way (`push.py`: `BusPush`, `GroupPush`, each returning
its `PushStats`); a rollout worker answers both on its "weights" port with `engine_loader.py`.

`vllm_broadcast.py` and `vllm_worker.py` import vLLM: only vLLM's backend imports them (vLLM
is an optional install); the other modules need torch alone.

What it does not do: decide when to push (the learner actor) or apply updates to a model (the
engines).
"""
