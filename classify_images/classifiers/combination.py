"""Feature combination: several channels side by side in one row, combined by a rule.

A multi-channel row is the concatenation of the rows of ``C`` channels (say grey Fisher vectors
and ScSPM codes), channel ``c`` holding the columns ``offset_c … offset_c + dims_c − 1``
(:class:`Channel`).  Three ways to combine them, as the feature-combination literature found
strong [1]_ [2]_:

``concat`` — concatenation with per-channel weights, each block normalised on its own
    .. math::

        \\phi(x) = \\big[\\, w_c \\, x_c / \\lVert x_c \\rVert_2 \\,\\big]_{c = 1 \\ldots C},

    so that a channel's weight, not its dimension or its scale, sets its share (Fisher vectors
    of 262 144 dimensions beside 21 504 ScSPM dimensions).  A linear classifier on ``φ`` sees the
    kernel :math:`\\sum_c w_c^2 \\langle \\hat x_c, \\hat y_c \\rangle`.

``average`` — the average of the per-channel kernels, Gehler & Nowozin's baseline [1]_
    .. math::

        K(x, y) = \\sum_c \\beta_c K_c(x_c, y_c), \\qquad \\beta_c = w_c / \\textstyle\\sum_d w_d,

    each ``K_c`` scaled to unit self-similarity (:math:`K_c(x, x) = 1`, the normalisation of [1]_,
    section 3).  Our classifiers train on explicit rows, so the rule gives the row whose kernel
    this is:

    * *linear kernel* (``linear``): :math:`K_c(x, y) = \\langle x_c, y_c\\rangle / (\\lVert x_c\\rVert
      \\lVert y_c \\rVert)` and :math:`\\langle \\phi(x), \\phi(y) \\rangle = \\sum_c \\beta_c
      K_c(x_c, y_c)` for :math:`\\phi(x) = [\\sqrt{\\beta_c}\\, x_c / \\lVert x_c \\rVert_2]_c`.
      **For the linear kernel the kernel average is a weighted, block-normalised concatenation**
      (``concat`` with weights :math:`\\sqrt{\\beta_c}`); with equal weights it differs from
      ``concat`` only by the global factor :math:`1/C` on the kernel, which the SVM's ``C``
      absorbs (``C`` is chosen by cross-validation: the two rules then give the same classifier).
    * *additive kernels homogeneous of degree 1* (``pmsvm``'s power mean, ``nsvm``'s histogram
      intersection): :math:`k(\\beta a, \\beta b) = \\beta\\, k(a, b)` for :math:`\\beta \\ge 0`,
      and :math:`K_c(x, x) = \\lVert x_c \\rVert_1` on non-negative rows, so
      :math:`\\phi(x) = [\\beta_c\\, x_c / \\lVert x_c \\rVert_1]_c` gives
      :math:`K(\\phi(x), \\phi(y)) = \\sum_c \\beta_c K_c(x_c, y_c)` with every ``K_c``
      normalised, exactly the averaged kernel (no Gram matrix: these classifiers keep their
      explicit, additive training).  Signed channels are refused with these classifiers.
    * ``mbkl``: its stumps depend on each dimension only through the order of its values, so
      any per-block scaling changes nothing (the rows are used as stored).

    What [1]_ did and we do not: their kernels are exponentiated χ² with a per-channel bandwidth
    (mean distance); we average the kernels our classifiers have (linear, power mean, HIK).

``mbkl`` — learnt weights (MBKL as the combiner, :class:`~classify_images.classifiers.mbkl.MBKL`)
    The rows as stored (scale-free, as above); MBKL draws stumps over all the channels'
    dimensions and learns their weights ``θ`` (its Step 1, an l1-regularised SVM), so the kernel
    :math:`\\sum_k \\theta_k [\\sigma_k(x) = \\sigma_k(y)]` is a learnt combination of the
    channels' additive stump kernels; :func:`mbkl_channel_weights` gives each channel's share
    :math:`\\sum_{k \\in c} \\theta_k / \\sum_k \\theta_k`.  MBKL's stumps are thresholds on
    non-negative histogram bins: signed channels (Fisher vectors, VLAD) are refused.

References
----------
.. [1] P. Gehler and S. Nowozin, "On feature combination for multiclass object classification",
   ICCV 2009.
.. [2] M. Varma and D. Ray, "Learning the discriminative power-invariance trade-off", ICCV 2007.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import ClassifyImagesError
from .registry import CLASSIFIERS, COMBINE_RULES, classifier_class

__all__ = [
    "COMBINE_RULES",
    "Channel",
    "CombinationError",
    "channels_from_dicts",
    "check_combination",
    "combine_rows",
    "channel_scales",
    "mbkl_channel_weights",
]

#: Rows combined at a time (a chunk of Fisher-vector rows is a few hundred MB at most).
_CHUNK_ROWS = 256


class CombinationError(ClassifyImagesError, ValueError):
    """A combination rule that cannot apply to these channels or this classifier (one line)."""


@dataclass(frozen=True)
class Channel:
    """One channel of a multi-channel row: its columns ``offset … offset + dims − 1``."""

    name: str  #: the ``[[channel]]`` table's name
    offset: int  #: first column
    dims: int  #: number of columns
    signed: bool  #: whether its values can be negative (Fisher vectors, VLAD)
    weight: float = 1.0  #: its weight ``w_c`` in the combination

    def to_dict(self) -> dict[str, Any]:
        """JSON form (manifest, model file header)."""
        return asdict(self)


def channels_from_dicts(
    entries: Sequence[dict[str, Any]], n_features: int, *, source: str = "channels"
) -> tuple[Channel, ...]:
    """Channels read back from their JSON form, checked to tile ``0 … n_features − 1`` in order.

    Raises
    ------
    CombinationError
        A missing key, a bad value, or channels that do not tile the row.
    """
    channels, offset = [], 0
    for entry in entries:
        try:
            channel = Channel(
                str(entry["name"]),
                int(entry["offset"]),
                int(entry["dims"]),
                bool(entry["signed"]),
                float(entry.get("weight", 1.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CombinationError(
                f"{source}: a channel entry is malformed ({exc!s}); rebuild the feature set"
            ) from None
        if channel.offset != offset or channel.dims < 1 or not np.isfinite(channel.weight) or channel.weight <= 0:
            raise CombinationError(
                f"{source}: channel {channel.name!r} (offset {channel.offset}, {channel.dims} dims, "
                f"weight {channel.weight}) does not follow the previous channels; rebuild the feature set"
            )
        channels.append(channel)
        offset += channel.dims
    if offset != n_features:
        raise CombinationError(
            f"{source}: the channels cover {offset} columns of the {n_features} of a row; rebuild the feature set"
        )
    return tuple(channels)


def _asks(classifier: str | type | Any, trait: str) -> bool:
    """The classifier's answer to ``trait``, a class attribute of
    :class:`~classify_images.classifiers.base.OneVsRestClassifierBase`
    (``homogeneous_additive_kernel``, ``learns_channel_weights``); ``classifier`` is a registered
    name, an estimator class or an instance."""
    if isinstance(classifier, str):
        classifier = classifier_class(classifier)
    return bool(getattr(classifier, trait, False))


def _weight_learners() -> list[str]:
    """The registered classifiers that learn the channel weights themselves (``--combine mbkl``)."""
    return [name for name in CLASSIFIERS if _asks(name, "learns_channel_weights")]


def check_combination(rule: str, channels: Sequence[Channel], classifier: str | type) -> None:
    """Refuse a rule that does not apply: an unknown rule, ``mbkl`` with another classifier or a
    signed channel, ``average`` with an additive classifier on a signed channel.  The classifier
    (a registered name or an estimator class) is asked, not named: its ``learns_channel_weights``
    and ``homogeneous_additive_kernel`` class attributes decide.

    Raises
    ------
    CombinationError
    """
    if rule not in COMBINE_RULES:
        raise CombinationError(f"--combine {rule!r}: allowed values are {', '.join(COMBINE_RULES)}")
    if not channels:
        raise CombinationError(
            f"--combine {rule}: the feature set has no channel layout (build it from a config with [[channel]] tables)"
        )
    signed = [channel.name for channel in channels if channel.signed]
    if rule == "mbkl":
        if not _asks(classifier, "learns_channel_weights"):
            name = classifier if isinstance(classifier, str) else getattr(classifier, "__name__", classifier)
            raise CombinationError(
                f"--combine mbkl learns the channel weights with MBKL: use --classifier "
                f"{' or '.join(_weight_learners())}, not {name!r}"
            )
        if signed:
            raise CombinationError(
                f"--combine mbkl: channel {signed[0]!r} is signed (MBKL's stumps combine "
                "non-negative channels only); drop it or use --combine average"
            )
    if rule == "average" and signed and _asks(classifier, "homogeneous_additive_kernel"):
        raise CombinationError(
            f"--combine average with {classifier}: channel {signed[0]!r} is signed (an additive "
            "kernel needs non-negative channels); use --classifier linear"
        )


def channel_scales(rule: str, channels: Sequence[Channel], classifier: str | type) -> tuple[str | None, np.ndarray]:
    """``(norm, factors)``: each block is divided by its ``norm`` (``"l2"``, ``"l1"``, or None: as
    stored) and multiplied by its factor (module docstring)."""
    weights = np.array([channel.weight for channel in channels], dtype=np.float64)
    if rule == "concat":
        return "l2", weights
    if rule == "average":
        beta = weights / weights.sum()
        return ("l1", beta) if _asks(classifier, "homogeneous_additive_kernel") else ("l2", np.sqrt(beta))
    if rule == "mbkl":
        return None, np.ones_like(weights)
    raise CombinationError(f"--combine {rule!r}: allowed values are {', '.join(COMBINE_RULES)}")


def combine_rows(
    X: np.ndarray, channels: Sequence[Channel], rule: str, classifier: str, *, out: np.ndarray | None = None
) -> np.ndarray:
    """The rows ``X`` (``n × Σ dims``) combined by ``rule`` for ``classifier`` (module docstring).

    Parameters
    ----------
    X : ndarray, shape (n_samples, n_features)
        Multi-channel rows (a memory-mapped array is read a chunk at a time).
    channels : sequence of Channel
    rule : {"concat", "average", "mbkl"}
    classifier : str or type
        Registered classifier name or estimator class: its ``homogeneous_additive_kernel``
        selects the block norm of ``average``.
    out : ndarray, optional
        Where to write (may be ``X`` itself, when writable); default: a new float32 array.

    Returns
    -------
    ndarray of float32, shape (n_samples, n_features)
        A block whose norm is 0 stays 0.
    """
    check_combination(rule, channels, classifier)
    norm, factors = channel_scales(rule, channels, classifier)
    if out is None:
        out = np.empty(X.shape, dtype=np.float32)
    for start in range(0, X.shape[0], _CHUNK_ROWS):
        rows = slice(start, start + _CHUNK_ROWS)
        block_rows = np.asarray(X[rows], dtype=np.float32)
        for channel, factor in zip(channels, factors):
            columns = slice(channel.offset, channel.offset + channel.dims)
            block = block_rows[:, columns].astype(np.float64)
            if norm is not None:
                size = np.abs(block).sum(axis=1) if norm == "l1" else np.sqrt(np.einsum("ij,ij->i", block, block))
                block /= np.where(size > 0, size, 1.0)[:, None]
            out[rows, columns] = block * factor
    return out


def mbkl_channel_weights(estimator: Any, channels: Sequence[Channel]) -> dict[str, float]:
    """Each channel's share of a fitted MBKL's stump weights: :math:`\\sum_{k \\in c} \\theta_k /
    \\sum_k \\theta_k` over the selected stumps (``stump_features_``, ``theta_``; with MBKL's default
    ``theta_exponent = 0`` every selected stump weighs 1: the share of the stumps Step 1 kept)."""
    features = np.asarray(estimator.stump_features_)
    theta = np.asarray(estimator.theta_, dtype=np.float64)  # one weight per selected stump (theta ** theta_exponent)
    total = float(theta.sum()) or 1.0
    return {
        channel.name: float(
            theta[(features >= channel.offset) & (features < channel.offset + channel.dims)].sum() / total
        )
        for channel in channels
    }
