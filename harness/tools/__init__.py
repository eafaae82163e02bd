"""Commands beside the run: calibrate (measured error rates) and serve (an OpenAI-compatible
server around an engine)."""
