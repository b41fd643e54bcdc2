"""``xbench``: one command with every step as a subcommand.

Subcommands are imported only when run, so ``xbench score`` and ``xbench validate`` work on the
scorer-only install (no torch), and ``xbench --help`` is instant.
"""
from __future__ import annotations

import importlib
import sys

import click

from xbench.schemas._cli import CONTEXT, EXTRA_HINT, UserError, run_main

from xbench import __version__

#: subcommand -> (module:attribute of its click command, one-line help, install extra it needs)
SUBCOMMANDS: dict[str, tuple[str, str, str | None]] = {
    "demo": ("xbench.demo:demo", "Run the whole pipeline on the synthetic phantom set and write a report.", "extract"),
    "run": ("xbench.suite:run", "Run a whole benchmark from a suite file (prepare, extract, score, report).", "extract"),
    "prepare": ("xbench.extract.prepare_cli:main", "Read a dataset in its native format into images.zarr + gt.zarr.", "extract"),
    "extract": ("xbench.extract.cli:main", "Run a model over images.zarr and write submission.zarr.", "extract"),
    "score": ("xbench.score.cli:score_command", "Validate and score submissions against a ground truth.", None),
    "report": ("xbench.score.report.cli:report", "Build the leaderboard, tables and figures from score outputs.", None),
    "compare": ("xbench.score.report.cli:compare", "Paired bootstrap comparison of two score outputs.", None),
    "show": ("xbench.score.report.show:show", "Draw one case and class: map, region outline, pointing-game peak.", None),
    "build-embeddings": ("xbench.extract.models.crossattn.cache_cli:build_embeddings",
                         "Cache MedKLIP/MAVL query embeddings from a local text encoder.", "extract"),
    "validate": ("xbench.schemas.cli:validate_cmd", "Check a store against the XBench contract.", None),
    "package": ("xbench.package:package", "Bundles for challenge platforms:", None),
    "sanity": ("xbench.extract.sanity:sanity", "Do the maps depend on the weights? The model randomisation test.", "extract"),
    "perturb": ("xbench.perturb:perturb", "Faithfulness round 2: images perturbed in the order of a submission's maps.", None),
    "human": ("xbench.human:human", "The human ceiling: a dataset's own radiologists scored like a model.",
              "extract"),
    "convert": ("xbench.schemas.cli:convert_cmd", "Build submission.zarr from a model's existing outputs:", None),
    "warm": ("xbench.score.warm:warm", "Compile the scorer's Numba kernels into the cache now (install, images).",
             None),
}


#: subcommands whose line in ``xbench --help`` ends with a list read from the command's own source (issue 46):
#: what xbench-convert reads (the list it dispatches on) and the targets of xbench package (its subcommands)
LISTED = {"convert": "xbench.schemas.cli:CONVERT_SOURCES", "package": "xbench.package:package"}


def _listed(name: str) -> str:
    module_name, _, attr = LISTED[name].partition(":")
    what = getattr(importlib.import_module(module_name), attr)
    if isinstance(what, click.Group):
        return "; ".join(f"{sub} ({cmd.short_help})" if cmd.short_help else sub for sub, cmd in what.commands.items())
    return "; ".join(what.values()) + "."


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
            if extra is None:  # the scorer side is always installed: this is a broken install, not a usage error
                raise
            raise UserError(f"'xbench {name}' {EXTRA_HINT} ({exc.name} is not installed)") from None
        return getattr(module, attr)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        """An unknown command names the closest ones (issue 35: `xbench scor` got no "did you mean")."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in SUBCOMMANDS:
            import difflib

            close = [n for n in SUBCOMMANDS if n.startswith(name)] if len(name) >= 2 else []
            close += difflib.get_close_matches(name, list(SUBCOMMANDS), n=3, cutoff=0.6)
            close = list(dict.fromkeys(close))[:3]
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, f"{help_text} {_listed(name)}" if name in LISTED else help_text)
                for name, (_, help_text, _) in SUBCOMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        prog = prog_name or "xbench"
        if argv and argv[0] in SUBCOMMANDS:  # errors name the subcommand: "xbench score: ..."
            prog = f"{prog} {argv[0]}"
        run_main(lambda a: super(LazyGroup, self).main(a, prog_name or "xbench", complete_var, standalone_mode=False, **extra),
                 None if args is None else argv, prog)  # None: run as a program (sys.argv)


@click.group("xbench", cls=LazyGroup, context_settings=dict(CONTEXT))
@click.version_option(__version__, prog_name="xbench")
def main() -> None:
    """XBench: does a chest X-ray VLM look where the radiologist looked?

    \b
    The flow:
      xbench prepare phantom --out data/        # images.zarr (public) + gt.zarr (private)
      xbench extract --model clip-tiny --images data/images.zarr --out sub.zarr
      xbench score sub.zarr --gt data/gt.zarr --out results/
      xbench report results/ --out report/

    Every step is also its own command (xbench-prepare, xbench-extract, ...).
    Run `xbench COMMAND --help` for each one's options.
    """


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
