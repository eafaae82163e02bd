"""``--update-goldens``: batch size 1 of this engine (or of ``--golden-engine``) becomes the
goldens, written all at once after a complete run, or not at all."""

from __future__ import annotations

from harness import __version__
from harness.errors import HarnessError, describe
from harness.model.cell import Cell
from harness.model.report import Timing
from harness.stages.generate import BatchFailed, generate_cell
from harness.stages.run import Generated, Prepared
from harness.storage.atomic import disk_errors
from harness.storage.generations import Row
from harness.storage.goldens import GoldenSet


def _golden_outputs(prep: Prepared, timing: Timing | None) -> dict[Cell, Row]:
    """Batch size 1 of every beam width from --golden-engine, as generated."""
    assert prep.golden_engine is not None
    out: dict[Cell, Row] = {}
    for w in prep.config.beam_widths:
        cell = Cell(1, w)
        try:
            out[cell] = generate_cell(
                prep.golden_engine, cell, prep.plan, prep.prompts, prep.config.decoding(w), timing=timing
            ).texts.row(0)
        except Exception as exc:
            cause = exc.cause if isinstance(exc, BatchFailed) else exc
            raise HarnessError(
                f"--golden-engine {prep.config.golden_engine}: {cell.id} failed "
                f"({describe(cause)}); goldens were left unchanged"
            ) from None
    return out


def record_goldens(
    prep: Prepared, generated: Generated, timing: Timing | None = None
) -> tuple[dict[int, GoldenSet], list[str]]:
    """Goldens from batch size 1 of this engine or of --golden-engine; written only when
    complete. Returns them per beam width and the paths written."""
    config, engine, dataset = prep.config, prep.engine, prep.dataset
    # --golden-engine's batch size 1 whole; this engine's as scored (cut to the ScoringCap)
    if prep.golden_engine is not None:
        source_engine, source = prep.golden_engine, _golden_outputs(prep, timing)
    else:
        source_engine = engine
        source = {c: out.scored(0) for c, out in generated.outputs.items() if c.batch_size == 1}
    failed = {c: generated.errors.get(c, "no output") for c in prep.plan.reference_cells if c not in source}
    if failed:
        raise HarnessError(
            "--update-goldens: batch size 1 did not complete ("
            + "; ".join(f"{c.id}: {m}" for c, m in failed.items())
            + "); goldens were left unchanged"
        )
    goldens: dict[int, GoldenSet] = {}
    for w in config.beam_widths:
        texts = source[Cell(1, w)]
        goldens[w] = GoldenSet(
            identity=engine.info.identity,
            dataset_name=dataset.info.name,
            dataset_hash=dataset.info.hash,
            settings=config.decoding(w).as_dict(),
            outputs={d.id: t or "" for d, t in zip(dataset.documents, texts)},
            source={
                "backend": source_engine.info.backend,
                "engine": source_engine.info.path,
                "identity": source_engine.info.identity,
                "batch_size": 1,
                "harness_version": __version__,
            },
        )
    with disk_errors(
        f"--goldens-dir {config.goldens_dir}",
        "the goldens there were left unchanged (all or none are replaced)",
    ):
        written = [str(path) for path in prep.store.write_all(goldens)]
    return goldens, written
