"""``xbench build-embeddings``: compute the MedKLIP / MAVL query-embedding cache once, offline.

MedKLIP and MAVL encode their entity descriptions (and MAVL its visual-aspect sentences) with
Bio_ClinicalBERT when the model is constructed; those embeddings are not in the checkpoints.
This command computes them from a local text-encoder folder and the official description files
that ship with the authors' repositories, exactly as the authors' test scripts do (their
``[CLS]``-only BERT tokenisation, 64 tokens, CLS pooling; descriptions by position for MedKLIP,
by name for MAVL), and writes the ``.npz`` cache the adapters read (``embeddings_cache:`` in the
model config). See :mod:`.cache` for the upstream lines each step follows.
"""
from __future__ import annotations

import json
import os

from dataclasses import dataclass
from pathlib import Path
import click

from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError, command, progress
from xbench.schemas.options import Choice, Flag, Int, Text, click_options, opt, parse


def replace_problem(out: Path) -> str | None:
    """Why ``--out`` may not be written (None when it may): an existing file is replaced only when it is a query
    cache XBench wrote (an npz holding ``entities``, ``disease_book`` and ``meta``, read bounded); a file of the
    user's, a folder, a link or a pipe is refused and nothing is deleted (docs/contract.md, "Output safety")."""
    import stat

    from xbench.schemas.errors import InputError
    from xbench.schemas.inputs import load_npz

    from xbench.extract.models.crossattn.cache import CACHE_MAX_BYTES

    refused = f"--out {out}: exists and is not a query cache XBench wrote ({{what}}); choose another path"
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return refused.format(what="a link" if stat.S_ISLNK(st.st_mode) else "not a regular file")
    try:
        arrays = load_npz(out, max_bytes=CACHE_MAX_BYTES, max_members=16)
    except InputError:
        return refused.format(what="not an npz file")
    return None if {"entities", "disease_book", "meta"} <= set(arrays) else refused.format(what="other arrays")


def run_build(text_encoder: str, descriptions: str, out: str, *, aspects: str | None = None,
              extra_entities: tuple[str, ...] = (), descriptions_by: str | None = None, max_length: int = 64,
              lower_case: bool | None = None, device: str = "cpu", quiet: bool = False) -> dict:
    """Build the cache and return a summary dict (path, entity and aspect counts, dimension, how
    the descriptions were read and which file keys stood for a differently named entity)."""
    from xbench.extract.models.crossattn.cache import build_query_cache
    from xbench.extract.models.crossattn.entities import ENTITIES

    not_ours = replace_problem(Path(out).expanduser())
    if not_ours:  # before the text encoder is loaded
        raise ValueError(not_ours)
    total = len(ENTITIES) + len(set(extra_entities) - set(ENTITIES))
    n_texts = total * (1 + (8 if aspects else 0))  # the bar's length only; MAVL's files have 8 aspects
    bar = progress(n_texts, desc="encoding", unit="text", enabled=not quiet)
    try:
        cache = build_query_cache(text_encoder, descriptions, out, aspects_path=aspects,
                                  extra_entities=extra_entities, descriptions_by=descriptions_by,
                                  max_length=max_length, lower_case=lower_case,
                                  device=device, progress=bar.update)
    finally:
        bar.close()
    return {"cache": str(out), "entities": len(cache.entities), "dim": int(cache.disease_book.shape[1]),
            "aspects": list(cache.aspects), "descriptions_by": cache.meta["descriptions_by"],
            "description_keys": cache.meta["description_keys"]}


@dataclass(kw_only=True)
class BuildEmbeddingsOptions:
    """What ``xbench build-embeddings`` takes (the fields are its options)."""

    text_encoder: Path = opt(check=Text(click.Path(exists=True, file_okay=False)), required=True,
                             help='Local Hugging Face folder of the text encoder (Bio_ClinicalBERT: '
                                  'config.json, weights, vocab.txt).')
    descriptions: Path = opt(check=Text(click.Path(exists=True, dir_okay=False)), required=True,
                             help='The official entity descriptions, a JSON object entity -> text, used '
                                  "unchanged (MedKLIP's or MAVL's 'observation explanation.json').")
    aspects: Path | None = opt(None, check=Text(click.Path(exists=True, dir_okay=False)),
                               help="MAVL only: JSON object entity -> list of aspect sentences (MAVL's "
                                    'gpt4_mimic.json).')
    out: Path = opt(check=Text(click.Path(dir_okay=False)), required=True, help='Cache file to write (.npz).')
    extra_entities: tuple = opt(default_factory=tuple, check=Text(), flag='--extra-entity', multiple=True,
                                help='Entity beyond the 75 (e.g. covid19); it must have texts in the JSON '
                                     'files. Repeatable.')
    descriptions_by: str | None = opt(None, check=Choice(('position', 'name')),
                                      help="Read descriptions by file order, keys ignored (MedKLIP's scripts; "
                                           "the default without --aspects) or by entity name (MAVL's scripts; "
                                           'the default with --aspects).')
    max_length: int = opt(64, check=Int(1, 4096),
                          help='Token length used upstream: [CLS] plus up to max-length - 1 word pieces, no '
                               '[SEP].')
    cased: bool = opt(False, check=Flag(),
                      help="Do not lower-case, whatever the folder's tokenizer_config.json says (upstream "
                           'lower-cases Bio_ClinicalBERT).')
    device: str = opt('cpu', check=Text(), help='Torch device for the text encoder.')
    quiet: bool = opt(False, check=Flag(), short='-q', help='No progress bar.')
    as_json: bool = opt(False, check=Flag(), flag='--json', help='Print the summary as JSON.')


@command("build-embeddings", on_interrupt=NOT_WRITTEN_HINT)
@click_options(BuildEmbeddingsOptions)
def build_embeddings(**params):
    """Build the entity (MedKLIP) or entity + aspect (MAVL) embedding cache.

    Texts are tokenised as the authors' vendored BERT tokenizer does ([CLS] + word pieces, no
    [SEP], padded to 64) and pooled on the CLS token. MedKLIP's descriptions are read by
    position, so its file's "eumonia" key still feeds the pneumonia query; a cache built by an
    older XBench is refused until rebuilt with this command.

    \b
    Example:
      xbench build-embeddings --text-encoder ~/models/Bio_ClinicalBERT \\
          --descriptions "MedKLIP/Sample_zero-shot_Classification_CXR14/observation explanation.json" \\
          --out ~/xbench/medklip_queries.npz
      xbench build-embeddings --text-encoder ~/models/Bio_ClinicalBERT \\
          --descriptions "MAVL/Zero-shot_grounding/observation explanation.json" \\
          --aspects MAVL/Pretrain/concept_gen/gpt4_mimic.json --out ~/xbench/mavl_queries.npz
    """
    o = parse(BuildEmbeddingsOptions, params)
    (text_encoder, descriptions, aspects, out, extra_entities, descriptions_by, max_length, cased, device, quiet,
         as_json) = (
        o.text_encoder, o.descriptions, o.aspects, o.out, o.extra_entities, o.descriptions_by, o.max_length,
        o.cased, o.device, o.quiet, o.as_json)
    from xbench.extract.models.errors import ModelConfigError

    try:
        summary = run_build(text_encoder, descriptions, out, aspects=aspects, extra_entities=tuple(extra_entities),
                            descriptions_by=descriptions_by, max_length=max_length,
                            lower_case=False if cased else None, device=device, quiet=quiet)
    except (ValueError, ModelConfigError, OSError) as exc:  # bad files or texts: invalid input, one line each
        raise UserError(str(exc).splitlines() or [type(exc).__name__]) from None
    if as_json:
        click.echo(json.dumps(summary))
    elif not quiet:
        click.echo(f"wrote {summary['cache']}: {summary['entities']} entities x {summary['dim']}-d"
                   + (f", aspects {', '.join(summary['aspects'])}" if summary["aspects"] else "")
                   + f"; descriptions read by {summary['descriptions_by']}")
        for entity, key in summary["description_keys"].items():
            click.echo(f"note: the description under key {key!r} was taken for entity {entity!r} (by position)")


main = build_embeddings

if __name__ == "__main__":  # pragma: no cover
    main()
