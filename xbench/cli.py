"""``xbench``: one command with every step as a subcommand.

Subcommands are imported only when run, so ``xbench score`` and ``xbench validate`` work on the
scorer-only install (no torch), and ``xbench --help`` is instant.
"""
from __future__ import annotations

import importlib
import sys

import click

from . import __version__

#: subcommand -> (module:attribute of its click command, one-line help, install extra it needs)
SUBCOMMANDS: dict[str, tuple[str, str, str | None]] = {
    "demo": ("xbench.demo:demo", "Run the whole pipeline on the synthetic phantom set and write a report.", "extract"),
    "run": ("xbench.suite:run", "Run a whole benchmark from a suite file (prepare, extract, score, report).", "extract"),
    "prepare": ("xbench.extract.prepare_cli:main", "Read a dataset in its native format into images.zarr + gt.zarr.", "extract"),
    "extract": ("xbench.extract.cli:main", "Run a model over images.zarr and write submission.zarr.", "extract"),
    "score": ("xbench.score.cli:score", "Validate and score submissions against a ground truth.", None),
    "report": ("xbench.score.report.cli:report", "Build the leaderboard, tables and figures from score outputs.", None),
    "compare": ("xbench.score.report.cli:compare", "Paired bootstrap comparison of two score outputs.", None),
    "build-embeddings": ("xbench.extract.models.crossattn.cache_cli:build_embeddings",
                         "Cache MedKLIP/MAVL query embeddings from a local text encoder.", "extract"),
    "validate": ("xbench.schemas.cli:validate_cmd", "Check a store against the XBench contract.", None),
    "convert": ("xbench.schemas.cli:convert_cmd", "Build submission.zarr from an HDF5 file or a folder of .npz files.", None),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        target, _, extra = SUBCOMMANDS[name]
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            hint = f" Install it with: pip install 'xbench[{extra}]'." if extra else ""
            raise click.ClickException(f"'xbench {name}' needs a package that is not installed ({exc.name}).{hint}") from None
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_text) for name, (_, help_text, _) in SUBCOMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="xbench")
def main() -> None:
    """XBench: does a chest X-ray VLM look where the radiologist looked?

    \b
    The flow:
      xbench prepare phantom --out data/        images.zarr (public) + gt.zarr (private)
      xbench extract --model clip-tiny --images data/images.zarr --out sub.zarr
      xbench score sub.zarr --gt data/gt.zarr --out results/
      xbench report results/ --out report/

    Every step is also its own command (xbench-prepare, xbench-extract, ...).
    Run `xbench COMMAND --help` for each one's options.
    """


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
