"""The emulator engine (a CPU stand-in for a TensorRT-LLM engine directory)."""

# float32: on the bundled model every output of the default grid (2,880 sequences, beam widths
# 1, 2 and 4) equals float64's token for token, at about 1.25x the speed; decoding on two cores
# is bound by reading the weights and the KV cache, which float32 halves. float64 stays an option.
DEFAULT_COMPUTE_DTYPE = "float32"
# in-flight prefill: prompt tokens admitted per scheduler step (emulator.prefill_chunk). The
# bundled prompts run 90-207 tokens (median about 150): a quarter fit one chunk, the rest take
# two steps, so a schedule of long prompts really admits them while others decode
DEFAULT_PREFILL_CHUNK = 128
