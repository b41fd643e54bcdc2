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

import click

from xbench.schemas._cli import NOT_WRITTEN_HINT, UserError, command, progress


def run_build(text_encoder: str, descriptions: str, out: str, *, aspects: str | None = None,
              extra_entities: tuple[str, ...] = (), descriptions_by: str | None = None, max_length: int = 64,
              lower_case: bool | None = None, device: str = "cpu", quiet: bool = False) -> dict:
    """Build the cache and return a summary dict (path, entity and aspect counts, dimension, how
    the descriptions were read and which file keys stood for a differently named entity)."""
    from .cache import build_query_cache
    from .entities import ENTITIES

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


@command("build-embeddings", on_interrupt=NOT_WRITTEN_HINT)
@click.option("--text-encoder", required=True, type=click.Path(exists=True, file_okay=False),
              help="Local Hugging Face folder of the text encoder (Bio_ClinicalBERT: config.json, weights, vocab.txt).")
@click.option("--descriptions", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The official entity descriptions, a JSON object entity -> text, used unchanged "
                   "(MedKLIP's or MAVL's 'observation explanation.json').")
@click.option("--aspects", type=click.Path(exists=True, dir_okay=False), default=None,
              help="MAVL only: JSON object entity -> list of aspect sentences (MAVL's gpt4_mimic.json).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Cache file to write (.npz).")
@click.option("--extra-entity", "extra_entities", multiple=True,
              help="Entity beyond the 75 (e.g. covid19); it must have texts in the JSON files. Repeatable.")
@click.option("--descriptions-by", type=click.Choice(["position", "name"]), default=None,
              help="Read descriptions by file order, keys ignored (MedKLIP's scripts; the default without "
                   "--aspects) or by entity name (MAVL's scripts; the default with --aspects).")
@click.option("--max-length", default=64, show_default=True, type=click.IntRange(min=1),
              help="Token length used upstream: [CLS] plus up to max-length - 1 word pieces, no [SEP].")
@click.option("--cased", is_flag=True, help="Do not lower-case, whatever the folder's tokenizer_config.json says "
                                            "(upstream lower-cases Bio_ClinicalBERT).")
@click.option("--device", default="cpu", show_default=True, help="Torch device for the text encoder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def build_embeddings(text_encoder, descriptions, aspects, out, extra_entities, descriptions_by, max_length, cased,
                     device, quiet, as_json):
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
    from ..errors import ModelConfigError

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
