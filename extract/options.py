"""The options of ``xbench-extract`` and ``xbench-prepare``, each written once (``xbench.schemas.options``).

:class:`ExtractOptions` is what one extraction run needs (the runner takes it) and :class:`PrepareOptions` what
one preparation takes; their fields are the commands' click options, the keys a suite's ``extract:`` /
``prepare:`` sections may set (those marked ``suite=True``), and the argv ``xbench run`` hands on to the
command. Light: click and the option machinery only (the suite parses its sections without torch).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import click

from xbench.extract.saliency import method_names
from xbench.schemas.options import MAX_CASES, MAX_CURVE_STEPS, MAX_DATA_SEED, MAX_PHANTOM_CASES, Choice, Flag, Float, Grid, Int, Text, opt


# ------------------------------------------------------------------------------------ xbench-extract
def _model_options(items: Sequence[str]) -> dict:
    """KEY=VALUE pairs into a nested dict (extract/models/checks.py: bounded, strict true/false)."""
    from xbench.extract.models.checks import parse_model_options

    return parse_model_options(tuple(items))


def _flatten(d: Mapping, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, Mapping) and v:
            out += _flatten(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _model_option_args(overrides: Mapping) -> list[str]:
    # a None override changes nothing (load_config skips it) and the CLI cannot say None; JSON is YAML, so
    # --model-option parses each value back to what it was
    return [f"{dotted}={json.dumps(value)}" for dotted, value in _flatten(overrides) if value is not None]


class AugmentSpecs:
    """Augmentation specs (xbench.schemas.augment): ``--augment`` repeated, or in a suite a list of specs or
    one comma-separated text. Checked as a whole (``whole_list``), since one value may hold several specs."""

    whole_list = True

    def click_type(self) -> click.ParamType:
        return click.STRING

    def problem(self, value) -> str | None:
        from xbench.schemas.augment import parse_specs
        from xbench.schemas.errors import InputError

        if not (isinstance(value, str) or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))):
            return "must be an augmentation spec or a list of them, e.g. [hflip, \"rotate:degrees=5\"]"
        try:
            parse_specs(value)
        except InputError as e:
            return "; ".join(str(p) for p in e.problems) or str(e)
        return None

    def argv(self, value) -> str:
        return str(value)


def _augment_list(items) -> list[str] | None:
    """Canonical specs from ``--augment`` values (each may list several); None when none was given."""
    from xbench.schemas.augment import canonical, parse_specs

    specs = canonical(parse_specs(list(items) if not isinstance(items, str) else items)) if items else []
    return specs or None


def _dataset_list(text: str | None) -> list[str] | None:
    return [d.strip() for d in text.split(",") if d.strip()] if text else None


@dataclass
class ExtractOptions:
    """Everything one extraction run needs; each field is also an ``xbench-extract`` option (the fields with
    ``suite=True`` are the keys of a suite's ``extract:`` section)."""

    model: str = opt(check=Text(), metavar="NAME_OR_CONFIG",
                     help="Registered model name, a YAML/TOML/JSON model config, or module:attr.")
    images: str | os.PathLike = opt(check=Text(click.Path(exists=True, file_okay=True, dir_okay=True)),
                                    help="images.zarr made by xbench-prepare.")
    out: str | os.PathLike = opt(check=Text(click.Path()),
                                 help="submission.zarr to write (resumed when it exists with the same spec).")
    method: str | None = opt(None, check=Text(),
                             help=f"Map method for dual encoders: {', '.join(method_names())} (default similarity; "
                                  "--list-methods says what each needs); cross-attention models use their own.")
    augment: Sequence[str] | None = opt(None, check=AugmentSpecs(), multiple=True, suite=True, metavar="SPEC",
                                        from_cli=_augment_list, to_cli=lambda v: _augment_list(v) or [],
                                        help="Test-time augmentation, repeatable: NAME or NAME:key=value,... (hflip, "
                                             "rotate, scale, translate, brightness, contrast, gamma, noise, blur, jpeg; "
                                             "docs/how-to/augmentations.md). The submission holds the mean over the original "
                                             "and each augmented view; maps are warped back first. Default: the model "
                                             "config's augment: (none).")
    augment_seed: int = opt(0, check=Int(0, MAX_DATA_SEED), suite=True,
                            help="Seed of the seeded augmentations (noise); each case's draw depends only on it, the "
                                 "dataset, the case id and the view.")
    datasets: Sequence[str] | None = opt(None, check=Text(), from_cli=_dataset_list, to_cli=lambda v: [",".join(v)],
                                         help="Comma-separated dataset keys to extract (default: all in the images store).")
    batch_size: int = opt(32, check=Int(1, 4096), suite=True, help="Images per forward pass.")
    device: str | None = opt(None, check=Text(), suite=True,
                             help="cpu, cuda, cuda:1 ... (default: this rank's GPU, else CPU).")
    precision: str | None = opt(None, check=Choice(("bf16", "fp16", "fp32")), suite=True,
                                help="Autocast precision (default fp32).")
    workers: int = opt(2, check=Int(0, 1024), suite=True, help="DataLoader worker processes reading images.zarr.")
    cases_per_block: int | None = opt(None, check=Int(1, 4096), suite=True,
                                      help="Rows per written block (default max(64, batch size)).")
    map_dtype: str = opt("float16", check=Choice(("float16", "float32")), suite=True)
    # blocks written on a background thread, or "process" (extract/writer_process.py)
    writer: str = opt("thread", check=Choice(("thread", "process")),
                      help="Write blocks on a background thread, or in a separate process (keeps zarr's encoding off "
                           "the GIL of the loop that feeds the GPU).")
    overrides: dict = opt(default_factory=dict, check=Text(), flag="--model-option", multiple=True, metavar="KEY=VALUE",
                          from_cli=_model_options, to_cli=_model_option_args,
                          help="Override a model config key (dots for nesting: preprocess.resize=crop). Repeatable.")
    # the launch, not the run: the runner ignores these two ("auto": one rank per visible GPU, suites only)
    nproc_per_node: int | None = opt(None, check=Int(1, 1024), suite=True, suite_default="auto", suite_also=("auto",),
                                     help="Launch this many local ranks through torch.distributed.run.")
    threads: int | None = opt(None, check=Int(1, 1024), suite=True, cli=False,
                              help="Cap on torch's CPU threads (suites only).")
    overwrite: bool = opt(False, check=Flag(), help="Delete an existing store written with a different spec.")
    limit: int | None = opt(None, check=Int(1, MAX_CASES),  # only the first N cases of each dataset (smoke tests)
                            help="Only the first N cases of each dataset: a smoke test on real data (the store can be "
                                 "validated, not scored against the full ground truth).")
    # faithfulness (contract § Faithfulness, docs/how-to/faithfulness.md)
    scores_only: bool = opt(False, check=Flag(),
                            help="Write scores and no maps (submission minor 2): round 2 of faithfulness, run on the "
                                 "round-2 images store that xbench perturb wrote.")
    faithfulness: str | None = opt(None, check=Text(click.Path(file_okay=False)), metavar="DIR",
                                   help="After --out, run both faithfulness rounds for this model: DIR/round2.zarr (the "
                                        "perturbed images), DIR/round2.key.npz (the key) and DIR/round2-sub.zarr (the scores).")
    faithfulness_curve: str = opt("deletion,insertion", check=Text(), metavar="CURVE[,CURVE...]",
                                  help="With --faithfulness: deletion, insertion and/or road.")
    faithfulness_steps: int = opt(10, check=Int(1, MAX_CURVE_STEPS), help="With --faithfulness: steps K per curve (xbench perturb --steps).")
    quiet: bool = opt(False, check=Flag(), short="-q", help="No progress bar.")

    def model_overrides(self) -> dict:
        """The model config overrides the adapter gets: ``overrides`` with ``method`` when one is chosen."""
        return {**self.overrides, "method": self.method} if self.method else dict(self.overrides)


# ------------------------------------------------------------------------------------ xbench-prepare
def _reader_options(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--option")
        out[key.strip().replace("-", "_")] = value.strip()
    return out


@dataclass
class PrepareOptions:
    """The options of ``xbench-prepare`` (the fields with ``suite=True`` are the keys of a suite's ``prepare:``
    section and of each of its datasets)."""

    root: Path | None = opt(None, check=Text(click.Path(path_type=Path)),
                            help="Folder holding the dataset exactly as downloaded (see data_cards/<dataset>.md). "
                                 "Not needed for phantom.")
    out: Path | None = opt(None, check=Text(click.Path(path_type=Path, file_okay=False)),
                           help="Output folder; images.zarr and gt.zarr are created or updated in it.")
    split: str | None = opt(None, check=Text(),
                            help="Which split to prepare; default: the dataset's evaluation split (--list shows each one's).")
    grid: Any = opt(224, check=Grid(1, 4096), suite=True, help="Evaluation grid of the ground truth, H or HxW.")
    image_size: int = opt(512, check=Int(16, 4096), suite=True, help="Side S of the stored S x S images.")
    keep_original: bool = opt(False, check=Flag(),
                              help="Also store every image at its original resolution, so models whose official "
                                   "preprocessing starts from the original get it (see docs/how-to/prepare.md).")
    text_probes: bool = opt(False, check=Flag(),
                            help="Add text probes of every phrase row (negated, sides swapped, words shuffled) as extra "
                                 "phrase rows; the ground truth records which are probes (docs/how-to/text-probes.md).")
    workers: int | None = opt(None, check=Int(1, 1024), suite=True, help="Decoding processes; default: every core.")
    cases_per_block: int = opt(32, check=Int(1, 4096), suite=True, help="Cases per image block (the unit of resuming).")
    max_skip_fraction: float = opt(0.01, check=Float(0, 1), suite=True,
                                   help="Fail (exit 2) when more than this fraction of cases must be skipped for bad input.")
    options: dict = opt(default_factory=dict, check=Text(), flag="--option", multiple=True, metavar="KEY=VALUE",
                        from_cli=_reader_options, to_cli=lambda d: [f"{k}={v}" for k, v in d.items()],
                        help="Reader option, repeatable (see the dataset's data card), e.g. --option negatives=data_entry.")
    allow_links_to: tuple = opt((), check=Text(click.Path(path_type=Path, file_okay=False)), multiple=True,
                                metavar="DIR", from_cli=tuple, to_cli=lambda v: [str(x) for x in v],
                                help="A folder that links under --root may lead to (for example images/ linked to "
                                     "another disk). Repeatable. Without it a link leading outside --root is refused; "
                                     "judged by real paths, every link resolved (docs/how-to/prepare.md).")
    n_cases: int | None = opt(None, check=Int(1, MAX_PHANTOM_CASES), help="phantom only: number of cases (default 200).")
    seed: int | None = opt(None, check=Int(0, MAX_DATA_SEED),
                           help="phantom: its random seed (default 0); with --perturb also the private key of the copies' "
                                "ids and seeds (default 0: choose a secret one for a real benchmark).")
    # the robustness track (docs/how-to/robustness.md); a SPEC may give a parameter as a range LOW..HIGH
    perturb: tuple = opt((), check=Text(), multiple=True, suite=True, metavar="SPEC[,SPEC...]",
                         from_cli=tuple, to_cli=lambda v: [v] if isinstance(v, str) else list(v),
                         help="Add perturbed copies of every case under opaque ids (robustness track), e.g. "
                              "--perturb hflip,rotate:degrees=-10..10. Repeatable.")
    perturb_copies: int = opt(1, check=Int(1, 32), suite=True,
                              help="Copies per SPEC and case, each with its own seed and drawn parameters (one for a "
                                   "SPEC that is neither seeded nor ranged, e.g. hflip: its copies would be identical).")
    perturb_seed: int | None = opt(None, check=Int(0, MAX_DATA_SEED), suite=True, cli=False,
                                   help="Suites only: the key of the copies' ids and seeds (the command's --seed).")
    overwrite: bool = opt(False, check=Flag(),
                          help="Replace a dataset that OUT already holds prepared with other options (without it, "
                               "that is refused, listing what differs).")
