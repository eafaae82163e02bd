"""The emulator engine (a CPU stand-in for a TensorRT-LLM engine directory)."""

# float32: on the bundled model every output of the default grid (2,880 sequences, beam widths
# 1, 2 and 4) equals float64's token for token, at about 1.25x the speed; decoding on two cores
# is bound by reading the weights and the KV cache, which float32 halves. float64 stays an option.
DEFAULT_COMPUTE_DTYPE = "float32"
# in-flight prefill: prompt tokens admitted per scheduler step (emulator.prefill_chunk). Real
# engines' per-step budgets (TensorRT-LLM max_num_tokens, vLLM max_num_batched_tokens,
# llama-server n_ubatch) sit above most prompts, so only long ones are split. The bundled and
# calibration prompts run 90-207 tokens; at 192 the longest few (all in the longest quarter,
# prefill-mix's long prompts) take two steps, admitted while others decode
DEFAULT_PREFILL_CHUNK = 192
