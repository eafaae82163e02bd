"""``python -m harness calibrate``: measured false-alarm and detection rates of the gate.

For every model (``models``: fault models, the healthy engine, benign drift, faults on drift,
the sweep models) an emulator engine is built and run over a pool of generated prompts:
``rounds`` rotation rounds per cell, each with its own seeded shuffle (and drift seed), so every
pool prompt sits at every position in ``rounds`` different batches (``generation``). A trial
then draws ``prompts`` documents from the pool and, for every position and prompt, one of the
rounds, and hands the scores to the run's own decision (``harness.verdict.decide``) with the
design of the run the model stands for: the default grid (a Holm family of 136 tests, of which
the tests of the cells the model does not run count as clean, p = 1: exact for the healthy
engine, conservative for detection), or, for a sweep model, every batch size up to its engine's
max_batch_size (``trials``). ``table`` holds each model's rates against its targets.

Batch size 1 is generated once, by the healthy engine, and is the baseline of every model: no
fault model and no drift changes batch size 1 (tests/unit/engines/test_faults.py checks it), as
on real engines. For partial degradation the engine is built to hit every prompt at its
position; a trial hits each of its prompts with probability ``fraction`` (damaged output) or
not (the output of the same engine without the fault: healthy, or drifting).

The sweep models run every batch size from 2 to ``--sweep-to`` (8) as ``--sweep`` does: each
trial seats each prompt where the run's sparse plan seats it (the sweep's cost); besides the
positions, a trial checks the boundary: every beam width's first failing batch size must be
the true one.
"""
