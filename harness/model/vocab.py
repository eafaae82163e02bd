"""Every vocabulary of the measurement model, as enums: each member is the word report.json
(and the terminal) shows for it."""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """A word of one vocabulary: equal to its text, shown as its text (``str``, f-strings,
    JSON), on every Python the harness supports."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Verdict(Word):
    """The outcome of a cell or a run."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # a cell the engine could not run (its message says why)
    UNTESTED = "untested"  # generated and scored, but not as the cell asked (its notice says how)
    # a scheduled cell the engine cannot run (no in-flight path, a static-batching release line,
    # a beam width its in-flight path does not decode): said with the reason, never a pass
    NOT_APPLICABLE = "not applicable"


class CheckStatus(Word):
    """The outcome of one build-limit or memory check."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"  # the engine does not record what the check needs


class Layout(Word):
    """The config.json layout an engine's limits were read from (docs/trtllm-versions.md)."""

    LEGACY = "legacy"  # builder_config / plugin_config, TensorRT-LLM 0.5-0.8
    UNIFIED = "unified"  # version / pretrained_config / build_config, 0.9 on
    EMULATOR = "emulator"  # unified plus the emulator's own section


class CacheReuse(Word):
    """Whether an engine serves a prompt's prefill from KV-cache blocks an earlier request
    computed (TensorRT-LLM's block reuse, vLLM's prefix caching, llama-server's cache_prompt).
    The rotation sends each prompt many times, so reuse changes what a position test measures."""

    OFF = "off"  # every prefill computed for its own batch: the default the harness asks for
    ON = "on"  # asked for (--kv-cache-reuse on): prefix-cache bugs are tested on purpose
    UNKNOWN = "unknown"  # the engine decides and does not say (a server, a module:Class)


class FindingKind(Word):
    """The known fault signatures a failing cell can match (harness.verdict.signatures)."""

    OVERFLOW = "overflow"
    BEAM_BUFFER = "beam-buffer"
    GRAPH_LADDER = "graph-ladder"
    FULL_BATCH = "full-batch"
    PADDING = "padding"
    STRIDE = "stride"
    SINGLE = "single"
    PARTIAL = "partial"
    ALL_POSITIONS = "all-positions"
    SPREAD = "spread"


class Backend(Word):
    """The harness's own backends (``--backend``; a plug-in is named by its module:Class)."""

    EMULATOR = "emulator"  # the bundled emulator engine (harness.engines.emulator)
    HF = "hf"  # a transformers model directory
    TRTLLM = "trtllm"  # a TensorRT-LLM engine through ModelRunner / ModelRunnerCpp
    LLMAPI = "llmapi"  # a TensorRT-LLM engine or checkpoint through the LLM API
    OPENAI = "openai"  # an OpenAI-compatible server (--engine http://...)


class Receiver(Word):
    """Who reads a run option (docs/options.md)."""

    DATASET = "dataset"  # harness.inputs: which documents, which fields
    PLAN = "plan"  # harness.plan: cells, rotation, shards
    ENGINE = "engine load"  # harness.engines: the backend, as it loads
    SERVER = "server backend"  # harness.engines.openai: every request to a server
    DECODING = "every request"  # DecodingSettings: how each prompt is decoded
    PREFLIGHT = "preflight"  # harness.limits: build limits and memory
    GENERATE = "generate stage"  # harness.stages.generate
    VERDICT = "verdict"  # harness.verdict: the tests and their gate
    STORAGE = "storage"  # harness.storage: folders, goldens, the generation cache
    REPORT = "report"  # harness.report: sign-off, the dry run's estimate
    CALIBRATE = "calibrate"  # python -m harness calibrate (harness.tools.calibrate)


class Dtype(Word):
    """The weights and compute dtype of the hf backend."""

    FLOAT32 = "float32"  # the CPU's; the default
    BFLOAT16 = "bfloat16"  # as most GPUs serve
    FLOAT16 = "float16"


class TrtllmRuntime(Word):
    """The TensorRT-LLM runner of the trtllm backend."""

    CPP = "cpp"  # ModelRunnerCpp
    PYTHON = "python"  # ModelRunner


class Served(Word):
    """How a server answered one batch's requests (harness.engines.batching)."""

    TOGETHER = "together"  # worked on together, as a batch
    ONE_AFTER_ANOTHER = "one after another"  # a queue: its batch positions are places in line
    UNJUDGED = "cannot tell"  # the answers' timing fits both
    UNTRUSTED = "token counts not plausible"  # the server's token counts cannot be its work


class FailureKind(Word):
    """How an engine batch failed, where the engine can tell (a server's answers)."""

    UNREACHABLE = "unreachable"
    SERVER_ERROR = "server-error"
    TIMEOUT = "timeout"
    REFUSED = "refused"
    BAD_ANSWER = "bad-answer"
    NO_BEAM_SEARCH = "no-beam-search"
    SPLIT_BATCH = "split-batch"


class Role(Word):
    """What one of the verdict's questions is in a run (report.json ``method.questions``)."""

    GATE = "gate"  # a failing answer fails the cell
    REPORTED = "reported"  # shown, never failing
    NOT_ANSWERED = "not answered"  # the run lacks what it needs (reference summaries)


class DatasetSource(Word):
    """Where a dataset was read from (harness.inputs.data)."""

    BUNDLED = "bundled"  # the bundled news set
    FILE = "file"  # a JSONL, JSON, CSV or Parquet file
    DISK = "disk"  # a datasets save_to_disk folder
    HUB = "hub"  # a hub dataset, read from the local cache


class Rotation(Word):
    """How prompts visit batch positions (harness.plan)."""

    FULL = "full"  # every prompt at every position of every cell
    SPARSE = "sparse"  # every prompt at one position per cell


class Question(Word):
    """The questions the verdict asks per cell and position (docs/method.md)."""

    POSITION = "position dependence"
    QUALITY = "batch-size quality"
    DETERMINISM = "determinism"
    CHANGES = "changed outputs"  # sparse damage: more outputs changed at one position


class Change(Word):
    """What ``compare`` found at one position, from the old run to the new one."""

    ADDED = "added"
    DROPPED = "dropped"
    NEW_DEGRADATION = "new degradation"
    FIXED = "fixed"
    WORSE = "worse"
    BETTER = "better"
    SAME = "same"
    UNMEASURED = "unmeasured"


class Signature(Word):
    """A report's keyed signature (``integrity.hmac``) as the reader finds it."""

    VALID = "valid"  # made with the reader's HARNESS_SIGNING_KEY
    INVALID = "invalid"  # present, but not made with the reader's key over this content
    MISSING = "missing"  # the reader has a key and the report carries no signature
    UNCHECKED = "unchecked"  # signed, but the reader has no key to check it with
    UNSIGNED = "unsigned"  # no signature and no key: nothing to check


class Direction(Word):
    """``compare``'s verdict: the new run against the old one."""

    WORSE = "worse"
    BETTER = "better"
    SAME = "same"


class Schedule(Word):
    """How a cell's requests reach the engine (``--schedules``; docs/method.md "Schedules").
    Bulk cells send one batch at a time to an idle engine; the others send requests one by one
    into a running engine's in-flight batch, at a concurrency C."""

    BULK = "bulk"  # B prompts start together and finish before the next B (the grid's cells)
    STAGGERED = "staggered"  # one at a time, each joining requests already decoding
    REFILL = "refill"  # more requests than C: each new one takes the slot one just freed
    PREFILL_MIX = "prefill-mix"  # the longest prompts sent while shorter ones decode
    WARM = "warm"  # the same prompts again on the warm engine, against their cold run


class Condition(Word):
    """Where one request of a scheduled cell ran, as the driver saw it and the engine said:
    what separates damaged requests from healthy ones (harness.verdict.schedules)."""

    FIRST_WAVE = "first wave"  # sent before any request finished
    JOINED = "joined a running batch"  # sent while another request was decoding
    FREED_SLOT = "took a freed slot"  # its slot had served another request of this run
    LONG_PREFILL = "long prompt sent while others decoded"
    # in flight while a long prompt was prefilled: from its sending to its first token where
    # the engine says when that was (Generation.first_token), else at its sending
    BESIDE_PREFILL = "in flight while a long prompt was prefilled"
    CACHED = "prompt served from cache"
    # at some moment, with a number of requests in flight off the CUDA-graph ladder (3, 5, 6, 7),
    # its slot's place among theirs at or past the largest power of two below that number: the
    # rows of a step padded up to the next captured size past its last captured one
    PAST_GRAPH = "ran past a captured graph size"  # the engine said it reused cached prompt tokens
