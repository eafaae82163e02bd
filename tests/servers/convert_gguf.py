"""Convert a transformers model folder to GGUF with llama.cpp's own converter.

    python tests/servers/convert_gguf.py --llama-cpp DIR MODEL_DIR OUT.gguf [--outtype f32]

DIR is a llama.cpp source tree (``vendor/llama.cpp`` of the llama-cpp-python sdist): its
``convert_hf_to_gguf.py``, ``conversion/`` and ``gguf-py`` do the work; only the model
class's vocabulary step is replaced by :mod:`gguf_vocab` (see there why). Needs torch,
numpy, safetensors and transformers (the test venv has them), not sentencepiece.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source tree")
    parser.add_argument("--outtype", default="f32", choices=["f32", "f16", "bf16", "q8_0"])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("outfile", type=Path)
    args = parser.parse_args(argv)

    src: Path = args.llama_cpp.resolve()
    sys.path[:0] = [str(HERE), str(src), str(src / "gguf-py")]
    import convert_hf_to_gguf  # type: ignore[import-not-found]  # llama.cpp's, from src
    from conversion import get_model_architecture, get_model_class  # type: ignore[import-not-found]

    if TYPE_CHECKING:
        from tests.servers.gguf_vocab import plan_vocab, write_plan
    else:  # this script runs as a file: its folder (HERE) is on sys.path
        from gguf_vocab import plan_vocab, write_plan

    hparams = json.loads((args.model_dir / "config.json").read_text(encoding="utf-8"))
    plan = plan_vocab(args.model_dir, hparams.get("vocab_size"))
    print(f"convert_gguf: {plan.summary()}", file=sys.stderr)

    from conversion import ModelType

    model_class = get_model_class(get_model_architecture(hparams, ModelType.TEXT))

    def set_vocab(self: Any) -> None:  # replaces the class's sentencepiece/gpt2 guesswork
        write_plan(plan, self.gguf_writer)

    model_class.set_vocab = set_vocab
    args.outfile.parent.mkdir(parents=True, exist_ok=True)
    sys.argv = [
        "convert_hf_to_gguf.py",
        str(args.model_dir),
        "--outfile",
        str(args.outfile),
        "--outtype",
        args.outtype,
    ]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
