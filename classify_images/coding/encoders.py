"""Encoders as plug-ins: one class per way of turning an image's descriptors into its vector.

An encoder owns everything that is particular to it, so that the pipeline (stage cache,
feature extractor, feature store, model file, command line) asks it instead of naming it:

* its **parameters** — the keys of the ``[codebook]`` table that belong to it, as a frozen
  dataclass whose fields carry their own checks (:func:`parameter`), validated where they
  are defined (:meth:`Encoder.check_params`);
* **learning** — :meth:`Encoder.learn`: a sample of training descriptors → its fitted
  state (a codebook array, or named arrays such as a PCA + GMM model);
* its **fitted state as named arrays and back** — :meth:`Encoder.to_arrays` /
  :meth:`Encoder.from_arrays`, the latter checking every array's shape, dtype and
  values against the parameters (:meth:`Encoder.state_spec`), so that a model file or a
  feature set loads without the loader knowing the encoder;
* **encoding** — :meth:`Encoder.encode` ``(state, descriptors, positions, pyramid) → row``,
  doing its own pooling over the spatial pyramid.  It is split in two so that every stage
  stays cached: :meth:`Encoder.cached_item` (what the per-image stage cache keeps: codes,
  per-cell statistics or the whole vector) and :meth:`Encoder.pool` (item → row).
  :meth:`Encoder.cache_dependencies` names the pyramid settings the cached item depends
  on: none for codes pooled afterwards (changing the pooling re-pools cached codes),
  the levels for VLAD and Fisher vectors, which aggregate per cell.
  :attr:`Encoder.caches_item` says whether the item is worth keeping at all: it is when a
  later build can do something with it that the feature set cannot (re-pool codes under
  another pooling, re-weight per-cell statistics) and it is small next to the row; it is
  not for VLAD and Fisher vectors, whose item *is* the row (1 MiB of float32 for a
  262 144-dimensional Fisher vector against 50-70 ms of CPU to recompute it from the image),
  already stored in the feature set, so that caching it doubled a build's disk and its
  writes for nothing a normal build reads back;
* what the rest of the pipeline needs to know: :meth:`Encoder.cell_dimension` (the row
  has ``cell_dimension · n_cells`` entries), :attr:`Encoder.signed` (rows can be negative
  whatever the pooling: no additive-kernel classifier), :attr:`Encoder.sparse_rows` (rows
  sparse enough for CSR shards), :meth:`Encoder.implementation_versions` (the versions
  of its modules, part of the cache keys and of the feature set's config hash).

The registry (:func:`encoder_class`, :func:`encoder_kinds`) is filled, not listed: every
:class:`Encoder` subclass with a ``kind`` defined in a public module of
:mod:`classify_images.coding` is found (as scikit-learn's ``all_estimators`` finds
estimators), and code elsewhere adds one with :func:`register_encoder`.  A new encoder is
therefore one module and one config.

Built-in encoders (``codebook.kind``), each one class here, the numerical work in its own
module:

========  =====================================  ============================================
kind      class                                  numbers
========  =====================================  ============================================
kmeans    :class:`VectorQuantization`            hard VQ (:mod:`.encode`) or localized soft
                                                 assignment (:mod:`.soft_assignment`)
sparse    :class:`SparseCoding`                  ScSPM codes (:mod:`.encode`, :mod:`.lars`)
llc       :class:`LocalityConstrainedCoding`     LLC codes (:mod:`.llc`)
vlad      :class:`Vlad`                          VLAD (:mod:`.vlad`)
fisher    :class:`FisherVectors`                 improved Fisher vectors (:mod:`.fisher`)
========  =====================================  ============================================

References
----------
1. F. Pedregosa et al., "Scikit-learn: machine learning in Python", JMLR 12, 2011
   (``utils.discovery.all_estimators``: estimators found by walking the package).
2. A. Vedaldi and B. Fulkerson, "VLFeat: an open and portable library of computer vision
   algorithms", ACM Multimedia 2010 (``vl/fisher.h``, ``vl/vlad.h``: every encoder the same
   shape — a model, descriptors in, a vector out).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from ..errors import ClassifyImagesError
from ..validation import BOOLEAN, Choices, Integral, Interval, ParameterValueError, Real, check_value
from . import codebook as codebook_module
from .pooling import n_pyramid_cells, pyramid_cells, spatial_pyramid_pool

__all__ = [
    "Pyramid",
    "parameter",
    "EncoderParameterError",
    "Encoder",
    "PooledCodes",
    "VectorQuantization",
    "SparseCoding",
    "LocalityConstrainedCoding",
    "Vlad",
    "FisherVectors",
    "register_encoder",
    "encoder_class",
    "encoder_kinds",
    "make_encoder",
    "DEFAULT_KIND",
]


# ---------------------------------------------------------------------------- pyramid
@dataclass(frozen=True)
class Pyramid:
    """The spatial pyramid an encoder pools over: grid levels and the pooling function.

    Parameters
    ----------
    levels : tuple of int or "RxC"
        Grids (``L`` for ``L × L`` cells, ``"RxC"`` for ``R`` rows × ``C`` columns).
    method : str
        Pooling function of codes (:data:`~classify_images.coding.pooling.POOLING_METHODS`);
        encoders that aggregate per cell themselves (VLAD, Fisher vectors) ignore it.
    """

    levels: tuple = (1, 2, 4)
    method: str = "average"

    @property
    def n_cells(self) -> int:
        """Cells over all levels, ``Σ R·C``."""
        return n_pyramid_cells(self.levels)

    def cells(self, x: np.ndarray, y: np.ndarray, image_shape: tuple[int, int]) -> np.ndarray:
        """Global cell of every descriptor at every level, (n_levels, n)
        (:func:`~classify_images.coding.pooling.pyramid_cells`)."""
        return pyramid_cells(x, y, image_shape, list(self.levels))


# ------------------------------------------------------------------------- parameters
class EncoderParameterError(ClassifyImagesError, ValueError):
    """An encoder parameter is invalid: ``key`` is the ``[codebook]`` key, the message is whole
    (``codebook.KEY = VALUE: expected …`` or a rule between keys)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def parameter(default: Any, *constraints: Any, doc: str = "") -> Any:
    """A field of an encoder's parameter dataclass, its allowed values declared with
    scikit-learn's constraints (:mod:`classify_images.validation`, as the classifiers'
    ``_parameter_constraints``): ``parameter(None, integer_at_least(1))``.

    ``None`` means *unset* (the encoder's default applies).  A key at its field default is left
    out of every hash, so adding a parameter keeps the cache keys and config hashes of every
    existing configuration.
    """
    return field(default=default, metadata={"constraints": constraints, "doc": doc})


def integer_at_least(low: int, high: int | None = None) -> Interval:
    """Constraint: an integer in ``[low, high]``."""
    return Interval(Integral, low, high, closed="left" if high is None else "both")


#: Constraint: a finite number > 0 (stored as float).
positive_number = Interval(Real, 0, None, closed="neither")
#: Constraint: true or false.
boolean = BOOLEAN


def one_of(*allowed: str) -> Choices:
    """Constraint: one of ``allowed``."""
    return Choices(allowed)


@dataclass(frozen=True)
class NoParameters:
    """Parameters of an encoder that has none of its own."""


# --------------------------------------------------------------------------- protocol
#: A fitted state: a codebook array (K, d), or named arrays.
State = np.ndarray | dict[str, np.ndarray]

#: Per-process memo of prepared coders (the Gram matrix of a dictionary, the GMM's
#: log-density terms, …), by encoder and codebook digest: built once, used for every image.
_PREPARED: dict[tuple, Any] = {}


class Encoder:
    """Base class of the encoders: descriptors of one image → its vector, over a learnt state.

    Parameters
    ----------
    table : mapping
        The plain ``[codebook]`` table (:meth:`~classify_images.pipeline.settings.config.PipelineConfig.codebook_params`):
        the common keys ``kind``, ``size`` (words ``K``), ``n_samples``, ``lambda``,
        ``n_iter``, ``seed``, and this encoder's own keys (:attr:`Params`; absent or
        ``None``: unset).

    Attributes
    ----------
    params : Params
        This encoder's own parameters, checked.
    """

    #: ``codebook.kind`` of this encoder (the registry key).
    kind: ClassVar[str]
    #: Frozen dataclass of the encoder's own ``[codebook]`` keys (:func:`parameter` fields).
    Params: ClassVar[type] = NoParameters
    #: Rows can be negative whatever the pooling and normalisation (signed by construction).
    signed: ClassVar[bool] = False
    #: Rows are sparse enough to be stored as CSR shards.
    sparse_rows: ClassVar[bool] = False
    #: Codes are never negative (hard or soft assignment weights): any pooling keeps rows non-negative.
    non_negative_codes: ClassVar[bool] = False
    #: Own keys that change how descriptors are coded but not what :meth:`learn` learns: left out
    #: of the learning stage's cache key, so that configurations differing only in them share a codebook.
    coding_only_keys: ClassVar[tuple[str, ...]] = ()
    #: The per-image stage cache keeps :meth:`cached_item` (codes, per-cell statistics).  False
    #: when the item is the finished row (VLAD, Fisher vectors): the feature set stores the row
    #: already, the item is larger than what it is computed from, and no later build re-pools
    #: it, so keeping it would cost a second copy of every row on disk (and its writes) for
    #: nothing; such an item is recomputed when asked for again.
    caches_item: ClassVar[bool] = True
    #: How a build stores this encoder's rows unless told (``build-features --rows``): ``"float32"``,
    #: or a lighter codec where its bytes were measured to cost no accuracy (Fisher vectors: ``int8``,
    #: docs/light-pipeline.md).
    default_rows: ClassVar[str] = "float32"

    @property
    def learns_from_positions(self) -> bool:
        """Whether :meth:`learn` takes the sampled descriptors' relative keypoint coordinates too
        (``coordinates=``, :func:`~classify_images.coding.fisher.spatial_coordinates`): the
        pipeline then samples them with the descriptors."""
        return False

    def __init__(self, table: Mapping[str, Any]) -> None:
        self.table = dict(table)
        self.size = int(table["size"])
        self.params = self.check_params({f.name: table.get(f.name) for f in dataclasses.fields(self.Params)}, self.size)

    # --- parameters
    @classmethod
    def own_keys(cls) -> tuple[str, ...]:
        """This encoder's own ``[codebook]`` keys."""
        return tuple(f.name for f in dataclasses.fields(cls.Params))

    @classmethod
    def check_params(cls, values: Mapping[str, Any], size: int) -> Any:
        """The :attr:`Params` of ``values`` (``None``: unset), each checked by its field, then
        the rules between keys (:meth:`check_rules`).

        Raises
        ------
        EncoderParameterError
            Naming the key and what is expected.
        """
        checked = {}
        for f in dataclasses.fields(cls.Params):
            value = values.get(f.name)
            if value is None:
                value = f.default
            elif value != f.default:
                try:
                    value = check_value(f"codebook.{f.name}", value, f.metadata["constraints"])
                except ParameterValueError as exc:
                    raise EncoderParameterError(f.name, str(exc)) from None
            checked[f.name] = value
        params = cls.Params(**checked)
        cls.check_rules(params, size)
        return params

    @classmethod
    def check_rules(cls, params: Any, size: int) -> None:
        """Rules between keys (e.g. ``n_neighbors ≤ size``); raises :class:`EncoderParameterError`."""

    def implementation_versions(self) -> dict[str, int]:
        """``IMPLEMENTATION_VERSION`` of this encoder's own modules (beyond the common
        ``preprocess``, ``dense_sift``, ``codebook``, ``encode``, ``pooling``, ``normalize``)."""
        return {}

    # --- learning and state
    def learn(self, descriptors: np.ndarray) -> State:
        """The fitted state from a sample of training descriptors (float32, (n, d))."""
        raise NotImplementedError

    def state_spec(self, descriptor_length: int) -> dict[str, tuple[tuple[int, ...], type]]:
        """Name → (shape, dtype) of every array of the fitted state."""
        return {"codebook": ((self.size, descriptor_length), np.float32)}

    def to_arrays(self, state: State) -> dict[str, np.ndarray]:
        """The fitted state as named arrays (what feature sets and model files store)."""
        return {"codebook": np.asarray(state)}

    def from_arrays(self, arrays: Mapping[str, np.ndarray], descriptor_length: int) -> State:
        """The fitted state from named arrays, checked against :meth:`state_spec`.

        Raises
        ------
        ValueError
            A missing array, a wrong shape or dtype, a non-finite value (one line).
        """
        spec = self.state_spec(descriptor_length)
        for name, (shape, dtype) in spec.items():
            if name not in arrays:
                raise ValueError(f"the {self.kind} encoder's array {name!r} is missing")
            array = arrays[name]
            if array.shape != shape or array.dtype != dtype:
                raise ValueError(
                    f"the {self.kind} encoder's array {name!r} has shape {array.shape} {array.dtype}, "
                    f"expected {shape} {np.dtype(dtype)}"
                )
            if not np.isfinite(array).all():
                raise ValueError(f"the {self.kind} encoder's array {name!r} holds NaN or infinite values")
        unexpected = sorted(set(arrays) - set(spec))
        if unexpected:
            raise ValueError(f"the {self.kind} encoder has no array {unexpected[0]!r}")
        self.check_state_values(arrays)
        return self._state_of(arrays)

    def check_state_values(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Value rules beyond finiteness (e.g. positive variances); raises ``ValueError``."""

    def _state_of(self, arrays: Mapping[str, np.ndarray]) -> State:
        return arrays["codebook"]

    def n_words(self, state: State) -> int:
        """Words ``K`` of the state (codewords, atoms or Gaussians)."""
        return int(np.shape(state)[0])

    def cell_dimension(self, state: State) -> int:
        """Length of one pyramid cell's part of the row."""
        return self.n_words(state)

    def dimension(self, state: State, pyramid: Pyramid) -> int:
        """Length of the row, ``cell_dimension · n_cells``."""
        return self.cell_dimension(state) * pyramid.n_cells

    # --- encoding
    def prepared(self, state: State, digest: str) -> Any:
        """The coder of ``state`` (:meth:`prepare`), built once per process and state."""
        key = (type(self), tuple(sorted(self.table.items())), digest)
        coder = _PREPARED.get(key)
        if coder is None:
            coder = self.prepare(state)
            _PREPARED.clear()
            _PREPARED[key] = coder
        return coder

    def prepare(self, state: State) -> Any:
        """What encoding needs of the state, computed once (default: the state itself)."""
        return state

    def cache_dependencies(self, pyramid: Pyramid) -> dict[str, Any]:
        """The pyramid settings :meth:`cached_item` depends on, as plain values (cache key)."""
        return {}

    def cached_item(
        self,
        coder: Any,
        descriptors: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        image_shape: tuple[int, int],
        **dependencies: Any,
    ) -> np.ndarray | dict[str, np.ndarray]:
        """What the per-image stage cache keeps for one image (arrays only)."""
        raise NotImplementedError

    def pool(self, coder: Any, item: np.ndarray | dict[str, np.ndarray], pyramid: Pyramid) -> np.ndarray:
        """The row (float32) of a cached item, before level weights and normalisation."""
        raise NotImplementedError

    def encode(
        self,
        state: State,
        descriptors: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        image_shape: tuple[int, int],
        pyramid: Pyramid,
    ) -> np.ndarray:
        """The row of one image: ``pool(cached_item(...))`` (no cache).

        Parameters
        ----------
        state : ndarray or dict of ndarray
            The fitted state (:meth:`learn`).
        descriptors : ndarray (n, d)
        x, y : ndarray (n,)
            Descriptor centres, pixels.
        image_shape : (height, width)
        pyramid : Pyramid

        Returns
        -------
        row : ndarray of float32, shape (:meth:`dimension`,)
        """
        coder = self.prepare(state)
        item = self.cached_item(coder, descriptors, x, y, image_shape, **self.cache_dependencies(pyramid))
        return self.pool(coder, item, pyramid)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, {self.params})"


class PooledCodes(Encoder):
    """An encoder whose per-descriptor codes are cached, then pooled over the pyramid
    (:func:`~classify_images.coding.pooling.spatial_pyramid_pool`): changing the pooling
    re-pools the cached codes without coding again.  Subclasses give :meth:`codes`."""

    def codes(self, coder: Any, descriptors: np.ndarray) -> np.ndarray | sp.csr_matrix:
        """Codes of the descriptors: VQ indices (n,) or a CSR matrix (n, K)."""
        raise NotImplementedError

    def cached_item(self, coder, descriptors, x, y, image_shape, **dependencies):
        codes = self.codes(coder, descriptors)
        item = {"x": x, "y": y, "shape": np.asarray(image_shape, dtype=np.int32)}
        if sp.issparse(codes):
            item.update(
                data=codes.data.astype(np.float32),
                indices=codes.indices.astype(np.int16),
                indptr=codes.indptr.astype(np.int32),
            )
        else:
            item["index"] = codes
        return item

    def pool(self, coder, item, pyramid):
        n_words = self.size
        if "index" in item:
            codes = item["index"]
        else:
            n = item["indptr"].shape[0] - 1
            codes = sp.csr_matrix((item["data"], item["indices"].astype(np.int32), item["indptr"]), shape=(n, n_words))
        return spatial_pyramid_pool(
            codes,
            item["x"],
            item["y"],
            tuple(int(v) for v in item["shape"]),
            n_words,
            levels=list(pyramid.levels),
            method=pyramid.method,
        )


# --------------------------------------------------------------------------- built-ins
@dataclass(frozen=True)
class VectorQuantizationParams:
    """``[codebook]`` keys of ``kind = "kmeans"``."""

    #: codes: "hard" one-hot VQ, or "soft" (localized soft assignment over soft_neighbors codewords)
    assignment: str = parameter("hard", one_of("hard", "soft"))
    #: nearest codewords of a soft code (unset: 3; codebook.size: the kernel codebook)
    soft_neighbors: int | None = parameter(None, integer_at_least(1))
    #: β of exp(-β d²), relative to the codebook's mean squared nearest-codeword distance (unset: 10)
    soft_beta: float | None = parameter(None, positive_number)


class VectorQuantization(PooledCodes):
    """k-means vector quantisation (BoF / SPM; Lazebnik et al. 2006): hard one-hot codes, or
    localized soft assignment (Liu et al. 2011) cached as per-cell statistics
    (:mod:`~classify_images.coding.soft_assignment`).  The state is the k-means centres."""

    kind = "kmeans"
    non_negative_codes = True
    Params = VectorQuantizationParams
    sparse_rows = True
    coding_only_keys = ("assignment", "soft_neighbors", "soft_beta")

    @classmethod
    def check_rules(cls, params, size):
        if params.assignment != "soft":
            for key in ("soft_neighbors", "soft_beta"):
                if getattr(params, key) is not None:
                    raise EncoderParameterError(
                        key,
                        f"codebook.{key} applies to codebook.assignment = 'soft' only; "
                        'set assignment = "soft" or remove it',
                    )
        if params.soft_neighbors is not None and params.soft_neighbors > size:
            raise EncoderParameterError(
                "soft_neighbors",
                f"codebook.soft_neighbors = {params.soft_neighbors}: expected at most codebook.size = {size}",
            )

    @property
    def soft(self) -> bool:
        """Soft assignment (else hard VQ)."""
        return self.params.assignment == "soft"

    def implementation_versions(self):
        from . import soft_assignment

        return {"soft_assignment": soft_assignment.IMPLEMENTATION_VERSION} if self.soft else {}

    def learn(self, descriptors):
        return codebook_module.learn_kmeans_codebook(
            descriptors, self.size, max_iter=self.table["n_iter"], random_state=self.table["seed"]
        )

    def prepare(self, state):
        if not self.soft:
            return state
        from .soft_assignment import DEFAULT_BETA, DEFAULT_N_NEIGHBORS, SoftAssignmentCoder

        return SoftAssignmentCoder(
            state, self.params.soft_neighbors or DEFAULT_N_NEIGHBORS, self.params.soft_beta or DEFAULT_BETA
        )

    def codes(self, coder, descriptors):
        from .encode import vq_encode

        return vq_encode(descriptors, coder)

    def cache_dependencies(self, pyramid):
        if not self.soft:
            return {}
        from .soft_assignment import POOLING_STATISTICS

        return {"levels": list(pyramid.levels), "statistics": POOLING_STATISTICS[pyramid.method]}

    def cached_item(self, coder, descriptors, x, y, image_shape, **dependencies):
        if not self.soft:
            return super().cached_item(coder, descriptors, x, y, image_shape)
        cells = pyramid_cells(x, y, image_shape, dependencies["levels"])
        return coder.cell_statistics(
            descriptors, cells, n_pyramid_cells(dependencies["levels"]), dependencies["statistics"]
        )

    def pool(self, coder, item, pyramid):
        if not self.soft:
            return super().pool(coder, item, pyramid)
        from .soft_assignment import pool_cell_statistics

        return pool_cell_statistics(item, pyramid.method)


@dataclass(frozen=True)
class SparseCodingParams:
    """``[codebook]`` keys of ``kind = "sparse"``."""

    #: dictionary learner: "online" (ours, on every core with the same bits as on one) or "spams"
    #: (spams.trainDL, one thread; the optional GPL extra); docs/benchmarks/sparse-coding.md; unset: "online"
    dictionary_solver: str | None = parameter(None, one_of(*codebook_module.DICTIONARY_SOLVERS))


class SparseCoding(PooledCodes):
    """Sparse coding over a learnt dictionary (ScSPM; Yang et al. 2009, Eq. 3), λ =
    ``codebook.lambda``; codes by feature-sign search (:class:`~classify_images.coding.encode.SparseCoder`).
    The state is the dictionary, atoms as rows, learnt by ``codebook.dictionary_solver``
    (:func:`~classify_images.coding.codebook.learn_sparse_dictionary`)."""

    kind = "sparse"
    Params = SparseCodingParams

    @property
    def solver(self) -> str:
        """The dictionary learner (``codebook.dictionary_solver``; unset: ``"online"``)."""
        return self.params.dictionary_solver or "online"

    @classmethod
    def check_rules(cls, params, size):
        if params.dictionary_solver == "spams" and (missing := codebook_module.spams_missing()):
            raise EncoderParameterError("dictionary_solver", missing)

    def implementation_versions(self):
        if self.solver != "online":
            return {}
        from . import dictionary

        return {"dictionary": dictionary.IMPLEMENTATION_VERSION}

    def learn(self, descriptors):
        return codebook_module.learn_sparse_dictionary(
            descriptors,
            self.size,
            lambda1=self.table["lambda"],
            n_iter=self.table["n_iter"],
            random_state=self.table["seed"],
            solver=self.solver,
        )

    def prepare(self, state):
        from .encode import SparseCoder

        return SparseCoder(state, self.table["lambda"])

    def codes(self, coder, descriptors):
        return coder.encode(descriptors)


@dataclass(frozen=True)
class LocalityConstrainedCodingParams:
    """``[codebook]`` keys of ``kind = "llc"``."""

    #: nearest codewords per LLC code (unset: 5)
    n_neighbors: int | None = parameter(None, integer_at_least(1))


class LocalityConstrainedCoding(PooledCodes):
    """Locality-constrained linear coding (Wang et al. 2010, approximated form) over
    k-means centres (:class:`~classify_images.coding.llc.LlcCoder`)."""

    kind = "llc"
    Params = LocalityConstrainedCodingParams

    @classmethod
    def check_rules(cls, params, size):
        if params.n_neighbors is not None and params.n_neighbors > size:
            raise EncoderParameterError(
                "n_neighbors", f"codebook.n_neighbors = {params.n_neighbors}: expected at most codebook.size = {size}"
            )

    def implementation_versions(self):
        from . import llc

        return {"llc": llc.IMPLEMENTATION_VERSION}

    learn = VectorQuantization.learn

    def prepare(self, state):
        from .llc import DEFAULT_N_NEIGHBORS, LlcCoder

        return LlcCoder(state, self.params.n_neighbors or DEFAULT_N_NEIGHBORS)

    def codes(self, coder, descriptors):
        return coder.encode(descriptors)


class _AggregatesCells(Encoder):
    """An encoder that aggregates the descriptors of each pyramid cell itself (VLAD, Fisher
    vectors): the item is the whole row, which depends on the pyramid's levels.  It is not
    cached (:attr:`~Encoder.caches_item`): the row is what the feature set stores, and it is
    larger than the input it is computed from (a 256 × 64 × 2 × 8-cell Fisher vector is 1 MiB
    of float32; no pooling or normalisation change re-uses it, since the encoder pools and
    normalises each cell itself)."""

    signed = True
    caches_item = False

    def cache_dependencies(self, pyramid):
        return {"levels": list(pyramid.levels)}

    def cached_item(self, coder, descriptors, x, y, image_shape, **dependencies):
        levels = dependencies["levels"]
        return coder.encode(
            descriptors,
            pyramid_cells(x, y, image_shape, levels),
            n_pyramid_cells(levels),
            **self.encode_inputs(x, y, image_shape),
        )

    def encode_inputs(self, x: np.ndarray, y: np.ndarray, image_shape: tuple[int, int]) -> dict[str, Any]:
        """Keyword arguments of the coder's ``encode`` beyond the descriptors and their cells (none)."""
        return {}

    def pool(self, coder, item, pyramid):
        return item


class Vlad(_AggregatesCells):
    """VLAD (Jégou et al. 2010) with signed square root and intra-normalisation over k-means
    centres (:class:`~classify_images.coding.vlad.VladEncoder`); ``K·d`` per cell."""

    kind = "vlad"

    def implementation_versions(self):
        from . import vlad

        return {"vlad": vlad.IMPLEMENTATION_VERSION}

    learn = VectorQuantization.learn

    def cell_dimension(self, state):
        return int(np.shape(state)[0] * np.shape(state)[1])

    def prepare(self, state):
        from .vlad import VladEncoder

        return VladEncoder(state)


@dataclass(frozen=True)
class FisherVectorsParams:
    """``[codebook]`` keys of ``kind = "fisher"``."""

    #: PCA dimensions of the descriptors (unset: 64; at most the descriptor length, 128 grey or
    #: 384 colour, checked when the model is learnt)
    pca_dims: int | None = parameter(None, integer_at_least(1, 384))
    #: append each keypoint's relative coordinates (x/w - 0.5, y/h - 0.5) to its PCA-reduced
    #: descriptor before the GMM (Sánchez et al. 2012): 2·K·(D + 2) per cell
    spatial_coordinates: bool = parameter(False, boolean)
    #: a descriptor's posteriors below this fraction of its most likely component's are 0, the
    #: others renormalised (unset: 1e-4; 0 keeps them all, the formulas of Perronnin et al.
    #: exactly, at about 1.3x the encoding time)
    posterior_threshold: float | None = parameter(None, Interval(Real, 0, 1, closed="left"))


class FisherVectors(_AggregatesCells):
    """Improved Fisher vectors (Perronnin et al. 2010) over a PCA + diagonal GMM
    (:class:`~classify_images.coding.fisher.FisherEncoder`); ``2·K·D`` per cell.  The state is
    the named arrays of :data:`~classify_images.coding.fisher.FISHER_MODEL_KEYS`.

    Storage: the stage cache keeps nothing per image (:attr:`~Encoder.caches_item` is false: the
    item is the finished row, 1 MiB of float32 at K = 256, D = 64 and 8 cells, more than the
    image's share of anything a later build could re-use, and about 50 ms of CPU to recompute),
    and the feature set stores the rows as 8-bit codes unless told otherwise
    (:attr:`~Encoder.default_rows`: at most a quarter of float32's bytes, packed by blocks of 64
    codes to about 4.7 bits a value on 15-Scenes; at a fixed C, within 0.06 points of float16
    rows on every 15-Scenes split and equal on every Flowers-17 split; docs/light-pipeline.md)."""

    kind = "fisher"
    Params = FisherVectorsParams
    #: 262 144 dimensions (the ``fisher`` configs) are 1 MiB a row in float32: 8-bit codes with one
    #: step per 4 096 values take at most 258.5 KiB, packed by blocks (relative L2 error 1.5e-2; 4-bit
    #: codes, 128.25 KiB, moved 15-Scenes splits by up to 0.3 points; docs/light-pipeline.md).
    default_rows = "int8"

    @property
    def pca_dims(self) -> int:
        """``D``, the PCA dimensions."""
        return self.params.pca_dims or codebook_module.DEFAULT_PCA_DIMS

    def implementation_versions(self):
        from . import fisher, gmm, vlad

        return {
            "vlad": vlad.IMPLEMENTATION_VERSION,
            "fisher": fisher.IMPLEMENTATION_VERSION,
            "gmm": gmm.IMPLEMENTATION_VERSION,
        }

    @property
    def learns_from_positions(self) -> bool:
        return self.params.spatial_coordinates

    def learn(self, descriptors, coordinates=None):
        if (coordinates is not None) != self.params.spatial_coordinates:
            raise ValueError(
                "the fisher encoder learns from the descriptors' coordinates exactly when "
                "codebook.spatial_coordinates is true"
            )
        return codebook_module.learn_fisher_model(
            descriptors,
            self.size,
            pca_dims=self.pca_dims,
            max_iter=self.table["n_iter"],
            random_state=self.table["seed"],
            coordinates=coordinates,
        )

    def state_spec(self, descriptor_length):
        from .fisher import N_SPATIAL_COORDINATES

        K, D, P = self.size, self.pca_dims, descriptor_length
        G = D + (N_SPATIAL_COORDINATES if self.params.spatial_coordinates else 0)  # the GMM's dimensions
        return {
            "pca_mean": ((P,), np.float64),
            "pca_components": ((D, P), np.float64),
            "weights": ((K,), np.float64),
            "means": ((K, G), np.float64),
            "variances": ((K, G), np.float64),
        }

    def check_state_values(self, arrays):
        if not (arrays["weights"] > 0).all() or not (arrays["variances"] > 0).all():
            raise ValueError("the fisher encoder's GMM weights and variances must be positive")

    def to_arrays(self, state):
        return {name: np.asarray(state[name]) for name in self.state_spec(np.shape(state["pca_mean"])[0])}

    def _state_of(self, arrays):
        return {name: arrays[name] for name in ("pca_mean", "pca_components", "weights", "means", "variances")}

    def n_words(self, state):
        return int(np.shape(state["weights"])[0])

    def cell_dimension(self, state):
        return 2 * int(np.prod(np.shape(state["means"])))

    def prepare(self, state):
        from .fisher import POSTERIOR_THRESHOLD, FisherEncoder

        threshold = self.params.posterior_threshold
        return FisherEncoder(
            state,
            spatial_coordinates=self.params.spatial_coordinates,
            posterior_threshold=POSTERIOR_THRESHOLD if threshold is None else threshold,
        )

    def encode_inputs(self, x, y, image_shape):
        if not self.params.spatial_coordinates:
            return {}
        from .fisher import spatial_coordinates

        return {"coordinates": spatial_coordinates(x, y, image_shape)}


# --------------------------------------------------------------------------- registry
#: The encoder of a configuration that names none: hard k-means VQ (BoF / SPM).
DEFAULT_KIND = VectorQuantization.kind

_REGISTERED: dict[str, type[Encoder]] = {}
_DISCOVERED: dict[str, type[Encoder]] | None = None


def register_encoder(cls: type[Encoder]) -> type[Encoder]:
    """Add an encoder class to the registry under ``cls.kind`` (usable as a decorator).

    Raises
    ------
    ValueError
        ``kind`` missing, or taken by another class.
    """
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"{cls.__name__} has no kind")
    known = _registry()
    if kind in known and known[kind] is not cls:
        raise ValueError(f"encoder kind {kind!r} is taken by {known[kind].__name__}")
    _REGISTERED[kind] = cls
    return cls


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _registry() -> dict[str, type[Encoder]]:
    """Every :class:`Encoder` subclass with a ``kind`` in the public modules of
    :mod:`classify_images.coding` (walked once), and the registered ones."""
    global _DISCOVERED
    if _DISCOVERED is None:
        package = importlib.import_module(__package__)
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.startswith("_"):
                importlib.import_module(f"{__package__}.{module.name}")
        _DISCOVERED = {
            cls.kind: cls
            for cls in _subclasses(Encoder)
            if "kind" in vars(cls) and cls.__module__.startswith(__package__ + ".")
        }
    return {**_DISCOVERED, **_REGISTERED}


def encoder_kinds() -> tuple[str, ...]:
    """The registered ``codebook.kind`` values (built-ins first, in the order defined)."""
    return tuple(_registry())


def encoder_class(kind: str) -> type[Encoder]:
    """The encoder class of ``codebook.kind``.

    Raises
    ------
    KeyError
        Unknown kind (the message lists the known ones).
    """
    known = _registry()
    if kind not in known:
        raise KeyError(f"unknown encoder kind {kind!r}; known kinds: {', '.join(known)}")
    return known[kind]


def make_encoder(table: Mapping[str, Any]) -> Encoder:
    """The encoder of a plain ``[codebook]`` table (its ``kind``, ``size`` and own keys)."""
    return encoder_class(table["kind"])(table)
