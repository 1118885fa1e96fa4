"""The names of validation figures: ``val/<metric>`` over every validated source,
``val/<source>/<metric>`` per source, ``val/train_sources/<metric>`` over the training sources
of a run that validates others too. :func:`metric_key` builds them and :func:`parse_metric_key`
reads them; nothing else spells them."""

from __future__ import annotations

from dataclasses import dataclass

VAL = "val"
TRAIN_SOURCES = "train_sources"  # val/train_sources/<metric>: the training sources' sum


@dataclass(frozen=True)
class MetricKey:
    """A validation figure: ``metric`` over ``source`` (None: every validated source;
    ``TRAIN_SOURCES``: the training sources')."""

    metric: str
    source: str | None = None

    def __str__(self) -> str:
        return metric_key(self.metric, self.source)

    @property
    def per_source(self) -> bool:
        """One source's figure (not the overall one, nor the training sources' sum)."""
        return self.source is not None and self.source != TRAIN_SOURCES


def metric_key(metric: str, source: str | None = None) -> str:
    """``val/<metric>`` (``source`` None) or ``val/<source>/<metric>``."""
    return f"{VAL}/{metric}" if source is None else f"{VAL}/{source}/{metric}"


def parse_metric_key(key: str) -> MetricKey | None:
    """The :class:`MetricKey` a key names; None for any other key (``train/loss``,
    ``confusion/...``, ``val/skipped`` is ``MetricKey("skipped")``)."""
    parts = key.split("/")
    if parts[0] != VAL or len(parts) not in (2, 3) or not all(parts):
        return None
    return MetricKey(parts[-1], parts[1] if len(parts) == 3 else None)


def metric_sources(keys: object) -> list[str]:
    """The sources of the per-source keys among ``keys`` (sorted)."""
    parsed = (parse_metric_key(str(k)) for k in keys)  # type: ignore[attr-defined]
    return sorted({k.source for k in parsed if k is not None and k.per_source})  # type: ignore[misc]


__all__ = ["TRAIN_SOURCES", "VAL", "MetricKey", "metric_key", "metric_sources", "parse_metric_key"]
