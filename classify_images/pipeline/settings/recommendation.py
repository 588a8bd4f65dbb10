"""Which classifier goes with a configuration, and which shipped config a configuration is.

Each shipped config names its classifier in a ``[classifier]`` table
(:func:`~classify_images.pipeline.settings.config.classifier_table`).  A configuration without one —
a user's own TOML file, or a feature set built from one — gets the classifier its rows call for,
asked of the encoder and the normalisation, never of a name:

* rows the encoder makes signed (Fisher vectors, VLAD; sparse or LLC codes pooled with their sign)
  go to the linear SVM: additive-kernel classifiers need non-negative rows;
* L1-normalised non-negative rows are histograms (bags of visual words, average-pooled codes),
  where an additive kernel (histogram intersection, the power-mean kernel of PmSVM [1]_) is far
  better than a linear one [2]_ [3]_: PmSVM;
* other non-negative rows (max-pooled sparse codes with L2 normalisation, ScSPM [4]_) are the
  linear SVM's.

:func:`pairing_warning` is the one line a poor pairing gets (in the log and the report): a linear
SVM on L1-normalised histograms.

References
----------
.. [1] J. Wu, "Power mean SVM for large scale visual classification", CVPR 2012.
.. [2] S. Maji, A. C. Berg and J. Malik, "Classification using intersection kernel support vector
   machines is efficient", CVPR 2008.
.. [3] A. Vedaldi and A. Zisserman, "Efficient additive kernels via explicit feature maps",
   IEEE TPAMI 34(3), 2012.
.. [4] J. Yang, K. Yu, Y. Gong and T. Huang, "Linear spatial pyramid matching using sparse coding for
   image classification", CVPR 2009.
"""

from __future__ import annotations

import functools
from typing import Any

from ...errors import ClassifyImagesError
from .config import PipelineConfig, classifier_table, load_config, read_any_config
from .defaults import named_configs

__all__ = [
    "ADDITIVE_KERNEL_CLASSIFIERS",
    "is_histogram_config",
    "is_signed_config",
    "suited_classifier",
    "pairing_warning",
    "shipped_config_name",
    "default_classifier",
]

#: Classifiers of additive kernels (non-negative rows only).
ADDITIVE_KERNEL_CLASSIFIERS = ("pmsvm", "nsvm", "mbkl")


def _channels(config: Any) -> list[PipelineConfig]:
    """The single configs of ``config`` (each channel's of ``[[channel]]`` tables)."""
    channels = getattr(config, "channels", None)
    return [channel.config for channel in channels] if channels else [config]


def is_signed_config(config: PipelineConfig) -> bool:
    """Whether the rows of ``config`` can be negative (a signed encoder, or signed codes pooled with their sign)."""
    from ...coding.encoders import encoder_class

    encoder = encoder_class(config.codebook.kind)
    if encoder.signed:
        return True
    return not encoder.non_negative_codes and config.pooling.method in ("average", "signed_max")


def is_histogram_config(config: PipelineConfig) -> bool:
    """Whether the rows of ``config`` are L1-normalised non-negative histograms (an additive kernel's rows)."""
    return config.normalization.method == "l1" and not is_signed_config(config)


def suited_classifier(config: Any) -> str:
    """The classifier the rows of ``config`` call for: ``"pmsvm"`` for histograms (every channel),
    else ``"linear"`` (module docstring)."""
    channels = _channels(config)
    return "pmsvm" if all(is_histogram_config(c) for c in channels) else "linear"


def pairing_warning(config: Any, classifier: str) -> str | None:
    """One line when ``classifier`` is a poor choice for the rows of ``config`` (None: a good one)."""
    channels = _channels(config)
    if classifier == "linear" and all(is_histogram_config(c) for c in channels):
        return (
            "a linear SVM on L1-normalised histograms is far less accurate than an additive-kernel SVM: "
            "use --classifier pmsvm (or nsvm) for these features"
        )
    return None


@functools.lru_cache(maxsize=1)
def _shipped_forms() -> tuple[tuple[str, str], ...]:
    """Each shipped config's settings (all tables but ``[dataset]``) in a comparable form, by name."""
    forms = []
    for name in sorted(named_configs()):
        try:
            forms.append((name, _form(load_config(name))))
        except ClassifyImagesError:  # pragma: no cover - a shipped config that does not load fails its own test
            continue
    return tuple(forms)


def _form(config: Any) -> str:
    import json

    plain = config.to_dict(semantic_only=True)
    if isinstance(plain, dict):
        plain = {key: value for key, value in plain.items() if key != "dataset"}
    return json.dumps(plain, sort_keys=True, default=str)


def shipped_config_name(config: Any) -> str | None:
    """The name of the shipped config whose settings ``config`` has (its split aside), or None.

    ``config``: a :class:`PipelineConfig`, a ``[[channel]]`` config, or the plain form a manifest
    records."""
    if isinstance(config, dict):
        try:
            config = read_any_config(config, source="feature set")
        except (ClassifyImagesError, TypeError, ValueError):
            return None
    form = _form(config)
    return next((name for name, shipped in _shipped_forms() if shipped == form), None)


def default_classifier(config: Any) -> tuple[str, dict[str, Any], str]:
    """The classifier for ``config`` when none is named: ``(name, params, why)`` — the
    ``[classifier]`` table of the shipped config it is, else :func:`suited_classifier`."""
    shipped = shipped_config_name(config)
    if shipped is not None:
        name, params = classifier_table(shipped)
        if name is not None:
            return name, params, f"the [classifier] of config {shipped}"
    name = suited_classifier(config)
    kind = "histograms" if name == "pmsvm" else "these features"
    return name, {}, f"the classifier for {kind}"
