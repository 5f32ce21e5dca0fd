"""Token records in the replay: sequences as a causal language model's loss sees them, and the
built-in model for them, an embedding + linear language model in NumPy.

A record becomes what the trainer's loss sees, judged as the token checks judge it
(`scrub.checks.tokens.token_facts`): its input ids truncated to ``--max-length``; its labels
(its own, or its input ids where its attention mask is 1) shifted by one position as a causal
model shifts them, so position t is trained to predict label t + 1; labels equal to the ignore
index (``--ignore-index``, -100 by default) not counted. A text record is replayed only when
``--tokenizer`` tokenizes it; without one it is skipped ("text") and the scan says so.

A record holding an id (or a label other than the ignore index) outside ``[0, V)`` is skipped
("token"), not replayed: PyTorch raises on it (``IndexError``) rather than computing a NaN, and
`token-out-of-range` already names it, by the same rule, with the same ``--vocab-size``. When the
vocabulary size is not given, V is one more than the largest id of the data, so only negative ids
are skipped.

The model (`EmbeddingLM`): ``logits_t = E[id_t] @ W + b``, softmax cross-entropy against the
shifted labels, the batch's loss the mean over the batch's counted tokens (what
``F.cross_entropy(..., ignore_index=-100)`` on the flattened batch computes, as Hugging Face's
``ForCausalLM`` models reduce), plain SGD on E, W and b. Each position's logits depend on its own
input id only, so a batch is computed once per distinct input id rather than once per position,
in blocks of logits of bounded size: exactly the per-position result, in bounded memory. A
vocabulary above `MODEL_VOCABULARY` tokens is hashed into that many (token mod 1,024: see the
class), which bounds a pass's cost whatever the vocabulary. A record's own loss is the mean over
its own counted tokens: NaN (0/0) when it has none, which is what training computes for it alone
(a batch of one record, or a loss averaged per sequence); in a larger batch Hugging Face's mean
over the batch's tokens hides it until a whole batch has none. That NaN is the replay's
`loss-nonfinite`, confirming `no-supervised-tokens` (`empty-sequence` for a sequence without a
token). In a scan the replay skips the records the scan condemned (`scrub.replay.stage`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scrub.checks.base import CheckOptions
from scrub.checks.tokens import CAUSAL_SHIFT, token_facts
from scrub.records import Record
from scrub.replay.model import PRECISIONS, ROUNDING

Identity = tuple[str, str, int]  # (source, key, index)

#: the built-in language model's embedding width: enough to be a model, small enough for any V
EMBEDDING_DIM = 16
#: logits computed at once, at most (float32 values: 16 MB)
LOGIT_BLOCK = 1 << 22
#: the built-in model's vocabulary at most: a larger vocabulary's tokens are hashed into this many
#: (a full-vocabulary softmax made the replay of a 32,000-token vocabulary ~100x slower than the
#: scan; what the model can find does not depend on it: see `EmbeddingLM`)
MODEL_VOCABULARY = 1024
#: a vocabulary derived from the data (no --vocab-size) larger than this is an id, not a size
MAX_DERIVED_VOCABULARY = 1 << 20
#: a position the loss does not count, in `Sequences.targets`
NOT_COUNTED = -1


@dataclass(frozen=True, slots=True)
class TokenSpec:
    """How token records become sequences. Picklable and immutable, for the workers."""

    vocab_size: int
    options: CheckOptions  # ignore index, --max-length, --tokenizer: as the token checks see them
    dim: int = EMBEDDING_DIM


@dataclass(frozen=True)
class Sequences:
    """Token sequences of different lengths, indexed like the rows of an array (the replayer
    slices, picks and joins them as it does feature vectors). Never modified: a copy is itself."""

    ids: tuple[np.ndarray, ...]  # per record, int64, truncated to --max-length
    #: per record, as long as its ids: the label position t is trained to predict, or NOT_COUNTED
    targets: tuple[np.ndarray, ...]
    masks: tuple[np.ndarray | None, ...]  # per record, its attention mask (None: every token attends)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: Any) -> Sequences:
        if isinstance(index, slice):
            return Sequences(self.ids[index], self.targets[index], self.masks[index])
        rows = [int(i) for i in np.asarray(index).reshape(-1)]
        return Sequences(
            tuple(self.ids[i] for i in rows),
            tuple(self.targets[i] for i in rows),
            tuple(self.masks[i] for i in rows),
        )

    def copy(self) -> Sequences:
        return self

    @classmethod
    def concatenate(cls, parts: Sequence[Sequences]) -> Sequences:
        return cls(
            tuple(a for p in parts for a in p.ids),
            tuple(t for p in parts for t in p.targets),
            tuple(m for p in parts for m in p.masks),
        )

    @classmethod
    def empty(cls) -> Sequences:
        return cls((), (), ())

    def lengths(self) -> np.ndarray:
        return np.array([len(ids) for ids in self.ids], np.int64)

    def attended(self) -> np.ndarray:
        """Per record, the ones of its attention mask (its length without a mask)."""
        return np.array(
            [len(ids) if m is None else int(np.count_nonzero(m)) for ids, m in zip(self.ids, self.masks)],
            np.int64,
        )

    def counted(self) -> np.ndarray:
        """Per record, the tokens its loss counts."""
        return np.array([int(np.count_nonzero(t >= 0)) for t in self.targets], np.int64)


@dataclass(slots=True)
class TokenFeatures:
    """The replayable token records of a piece of data, in order, and why the others were left
    out (the token counterpart of `scrub.replay.features.Features`)."""

    identities: list[Identity]
    X: Sequences
    y: np.ndarray  # (n,) zeros: a language model's labels are in its sequences
    rows: np.ndarray  # positions of these records in the input
    skipped: Counter = field(default_factory=Counter)

    @classmethod
    def empty(cls, skipped: Counter | None = None) -> TokenFeatures:
        nothing = np.empty(0, np.int64)
        return cls([], Sequences.empty(), nothing, nothing.copy(), skipped or Counter())

    @classmethod
    def concatenate(cls, parts: list[TokenFeatures]) -> TokenFeatures:
        if not parts:
            return cls.empty()
        return cls(
            [identity for p in parts for identity in p.identities],
            Sequences.concatenate([p.X for p in parts]),
            np.concatenate([p.y for p in parts]),
            np.concatenate([p.rows for p in parts]),
            sum((p.skipped for p in parts), Counter()),
        )

    def __len__(self) -> int:
        return len(self.identities)


def featurize_token_records(records: Iterable[Record], spec: TokenSpec) -> TokenFeatures:
    """The records as sequences, in order; the others counted by reason: "payload" (none, or not
    a language-model record), "text" (not tokenized: no --tokenizer), "token" (an id or a label
    outside [0, V)), "length" (labels or mask of another length than the ids)."""
    identities, ids, targets, masks, rows = [], [], [], [], []
    skipped: Counter[str] = Counter()
    for position, record in enumerate(records):
        found = token_sequence(record, spec)
        if isinstance(found, str):
            skipped[found] += 1
            continue
        identities.append((record.source, record.key, record.index))
        ids.append(found[0])
        targets.append(found[1])
        masks.append(found[2])
        rows.append(position)
    if not identities:
        return TokenFeatures.empty(skipped)
    sequences = Sequences(tuple(ids), tuple(targets), tuple(masks))
    y = np.zeros(len(identities), np.int64)
    return TokenFeatures(identities, sequences, y, np.array(rows, np.int64), skipped)


def token_sequence(record: Record, spec: TokenSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | str:
    """(input ids, targets, attention mask) of a record as the loss sees it, or why it has none."""
    options = spec.options
    facts = token_facts(record, options)
    if facts is None:
        return "payload"
    if facts.ids is None or facts.labels is None:
        return "text"
    cut = len(facts.labels)  # the labels the loss sees are truncated already
    ids = np.asarray(facts.ids)[:cut]
    if ids.dtype.kind not in "iu":
        return "payload"
    own_labels = record.meta.get("token_labels")
    own = own_labels is not None or record.meta.get("kind") == "text"
    mask = record.meta.get("attention_mask")
    for given in (own_labels, mask):  # a collator cannot stack what is not as long as the ids
        if given is not None and len(given) != len(facts.ids):
            return "length"
    if mask is not None:
        mask = np.asarray(mask)[:cut]
    ignore = options.token_ignore_index
    labels = np.asarray(facts.labels).astype(np.int64)
    counted = np.ones(len(labels), bool) if ignore is None else labels != ignore
    if not own and mask is not None:
        counted &= mask != 0  # labelled by its ids where it attends, as the token checks label it
    high = spec.vocab_size
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= high):
        return "token"
    if counted.any() and (int(labels[counted].min()) < 0 or int(labels[counted].max()) >= high):
        return "token"
    targets = np.full(len(ids), NOT_COUNTED, np.int64)
    if len(ids) > CAUSAL_SHIFT:
        targets[:-CAUSAL_SHIFT] = np.where(counted[CAUSAL_SHIFT:], labels[CAUSAL_SHIFT:], NOT_COUNTED)
    return ids.astype(np.int64), targets, None if mask is None else mask.astype(np.int64)


def token_extent(records: Iterable[Record], options: CheckOptions) -> tuple[int, int, int]:
    """(largest input id or label, longest sequence as fed, text records not tokenized): what the
    replay needs before its first batch when --vocab-size or --max-length is not given."""
    largest, longest, texts = -1, 0, 0
    ignore = options.token_ignore_index
    for record in records:
        facts = token_facts(record, options)
        if facts is None:
            continue
        if facts.ids is None or facts.labels is None:
            texts += 1
            continue
        ids = np.asarray(facts.ids)
        if len(ids) and ids.dtype.kind in "iu":
            largest = max(largest, int(ids.max()))
        labels = np.asarray(facts.labels)
        if ignore is not None:
            labels = labels[labels != ignore]
        if len(labels) and labels.dtype.kind in "iu":
            largest = max(largest, int(labels.max()))
        longest = max(longest, len(facts.labels))
    return largest, longest, texts


# -- the model ----------------------------------------------------------------------------------


class LanguagePass:
    """What a language model's pass over a batch tells the replayer, built-in or PyTorch: what
    went non-finite, in the batch and in each record's own part, and why (its counted tokens)."""

    __slots__ = ()
    losses: np.ndarray  # (n,) each record's mean over its counted tokens (NaN: none)
    mean_loss: float  # the batch's mean over its counted tokens
    counted: np.ndarray  # (n,) tokens each record's loss counts
    lengths: np.ndarray  # (n,) tokens fed
    attended: np.ndarray  # (n,) ones in the attention mask
    bad_logits: np.ndarray  # (n,) bool: a record with a non-finite logit

    def gradient_finite(self) -> bool:
        raise NotImplementedError

    def nonfinite(self) -> list[str]:
        found = []
        if self.bad_logits.any():
            found.append("logits")
        if not (np.isfinite(self.losses).all() and math.isfinite(self.mean_loss)):
            found.append("loss")
        if not self.gradient_finite():
            found.append("gradient")
        return found

    def rows_finite(self) -> np.ndarray:
        return np.isfinite(self.losses) & ~self.bad_logits

    def own(self, i: int) -> list[str]:
        """What is non-finite in record ``i``'s own part of the pass."""
        return (["logits"] if self.bad_logits[i] else []) + ([] if np.isfinite(self.losses[i]) else ["loss"])

    def why(self, i: int) -> dict[str, Any]:
        """Details for record ``i``'s issue: why its loss is what it is."""
        return counted_details(int(self.counted[i]), int(self.lengths[i]), int(self.attended[i]))


@dataclass(frozen=True, slots=True)
class TokenPass(LanguagePass):
    """One forward and backward pass of `EmbeddingLM` over a batch of n sequences."""

    losses: np.ndarray  # (n,) float32: each record's mean over its counted tokens (NaN: none)
    mean_loss: float  # the batch's mean over its counted tokens (NaN: none in the whole batch)
    counted: np.ndarray  # (n,) tokens each record's loss counts
    lengths: np.ndarray  # (n,) tokens fed
    attended: np.ndarray  # (n,) ones in the attention mask
    bad_logits: np.ndarray  # (n,) bool: a record with a non-finite logit
    grad_w: np.ndarray  # (D, C): C the output classes
    grad_b: np.ndarray  # (C,)
    rows: np.ndarray  # (U,) the embedding rows the batch used
    grad_rows: np.ndarray  # (U, D) their gradient (the embedding's gradient is zero elsewhere)
    grad_norm2: float

    def gradient_finite(self) -> bool:
        return math.isfinite(self.grad_norm2)


def counted_details(counted: int, length: int, attended: int) -> dict[str, Any]:
    """A record's issue's details: its tokens, those counted, and when none is, the token check
    that names the cause (a sequence without a token, a mask without a 1, labels all ignored)."""
    details: dict[str, Any] = {"tokens": length, "counted_tokens": counted}
    if counted == 0:
        empty = "empty-sequence" if length == 0 else "empty-attention" if attended == 0 else None
        details["confirms"] = empty or "no-supervised-tokens"
        details["why"] = "its loss is a mean over 0 counted tokens: 0/0"
    return details


class EmbeddingLM:
    """``logits_t = E[id_t] @ W + b``: the smallest language model, for ``--dummy-loss`` on tokens.

    E is drawn from N(0, 1) (``torch.nn.Embedding``'s initialization), W from N(0, init_std²),
    both by ``numpy.random.default_rng(seed)``; b is zero. Under float16 / bfloat16 the embedding
    rows, the weights, the logits and the incoming gradient are rounded as `LinearSoftmax` rounds
    them (mixed precision); log-softmax and loss run in float32.

    The model's vocabulary is ``C = min(V, hashed_vocabulary)`` (`MODEL_VOCABULARY` by default):
    up to C tokens it is V's, input ids and labels as they are; beyond, the tokens are *hashed*,
    each input id and label ``t`` taken as ``t % C``: exactly this model on a vocabulary of C
    (tested). A pass costs (distinct input ids) x (output classes) logits, up to C x C with the
    hash, whatever V is: a full softmax over 32,000 tokens cost ~4 s a batch of 64 sequences of
    ~288 uniformly random tokens on two cores, ~60 passes of the hashed model's size. What the
    model can find does not change: its logits are bounded by its weights, so what goes
    non-finite is a record's mean over zero counted tokens (which no hash changes), and the
    pathologies of values (precision, an update) are computed as before; its loss starts at
    ln(C).
    """

    name = "lm"
    #: each record's loss depends on that record alone
    per_record = True
    standardized = False

    def __init__(
        self,
        vocab_size: int,
        dim: int = EMBEDDING_DIM,
        seed: int = 0,
        init_std: float = 0.01,
        precision: str = "float32",
        hashed_vocabulary: int | None = None,
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
        limit = MODEL_VOCABULARY if hashed_vocabulary is None else hashed_vocabulary
        if vocab_size < 1 or dim < 1 or limit < 1:
            raise ValueError("the model needs vocab_size >= 1, dim >= 1 and hashed_vocabulary >= 1")
        classes = min(vocab_size, limit)
        #: the data's vocabulary, V (the model's own is `classes`)
        self.vocab_size = vocab_size
        rng = np.random.default_rng(seed)
        self.embedding = rng.standard_normal((classes, dim)).astype(np.float32)
        self.weight = (rng.standard_normal((dim, classes)) * init_std).astype(np.float32)
        self.bias = np.zeros(classes, np.float32)
        self.precision = precision

    @property
    def classes(self) -> int:
        """The model's vocabulary, C: V, or the buckets V's tokens are hashed into."""
        return self.bias.shape[0]

    @property
    def hashed(self) -> bool:
        return self.classes < self.vocab_size

    def run(self, X: Sequences, y: np.ndarray | None = None) -> TokenPass:
        """Forward and backward over the sequences (``y`` is not used: the labels are in them)."""
        n, C, D = len(X), self.classes, self.embedding.shape[1]  # C: the output classes
        lengths = X.lengths()
        ids = np.concatenate(X.ids) if n else np.empty(0, np.int64)
        targets = np.concatenate(X.targets) if n else np.empty(0, np.int64)
        owner = np.repeat(np.arange(n), lengths)
        counted = targets >= 0
        ids, targets, owner = ids[counted], targets[counted], owner[counted]
        if self.hashed:  # this model on a vocabulary of C: each token taken as its hash
            ids, targets = ids % C, targets % C
        total = len(ids)
        rows, inverse = np.unique(ids, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        by_row = inverse[order]
        token_losses = np.zeros(total, np.float32)
        bad_rows = np.zeros(len(rows), bool)
        grad_w = np.zeros((D, C), np.float32)
        grad_b = np.zeros(C, np.float32)
        grad_rows = np.zeros((len(rows), D), np.float32)
        block = max(1, min(len(rows), LOGIT_BLOCK // C))
        buffer = np.empty(block * C, np.float32)  # one block's logits, then its gradient, reused
        partial = np.empty((D, C), np.float32)
        scale = np.float32(1.0 / max(total, 1))
        with np.errstate(all="ignore"):  # overflow and NaN are findings, not warnings
            weight, bias = self._cast(self.weight), self._cast(self.bias)
            for first in range(0, len(rows), block):
                h = self._cast(self.embedding[rows[first : first + block]])
                u = len(h)
                logits = buffer[: u * C].reshape(u, C)
                np.matmul(h, weight, out=logits)
                if self.precision != "float32":
                    logits[...] = self._cast(logits)
                logits += bias
                if self.precision != "float32":
                    logits[...] = self._cast(logits)
                low, high = np.searchsorted(by_row, [first, first + u])
                chosen = order[low:high]
                local, wanted = inverse[chosen] - first, targets[chosen]
                picked = logits[local, wanted]  # each position's logit of its label
                bad_block = ~np.isfinite(logits.sum(axis=1))  # a sum that overflows: look closer
                if bad_block.any():
                    bad_block[bad_block] = ~np.isfinite(logits[bad_block]).all(axis=1)
                bad_rows[first : first + u] = bad_block
                top = logits.max(axis=1)
                logits -= top[:, None]  # the stable log-softmax: exp never overflows
                np.exp(logits, out=logits)
                mass = logits.sum(axis=1)
                token_losses[chosen] = (top + np.log(mass))[local] - picked
                # d(mean loss)/d(logits), summed over the positions of each input id:
                # (count · softmax - the labels' counts) / counted tokens
                logits *= (np.bincount(local, minlength=u) / mass * scale).astype(np.float32)[:, None]
                np.subtract.at(logits, (local, wanted), scale)
                delta = self._cast(logits)
                np.matmul(h.T, delta, out=partial)
                grad_w += partial  # float32 accumulation over the blocks, as one GEMM's
                grad_b += delta.sum(axis=0, dtype=np.float32)
                grad_rows[first : first + u] = self._cast(delta @ weight.T)
            grad_w = self._cast(grad_w)
            sums = np.bincount(owner, weights=token_losses, minlength=n)
            per_record = np.bincount(owner, minlength=n)
            losses = (sums / per_record).astype(np.float32)  # 0/0 = NaN: nothing counted
            mean_loss = float(token_losses.sum(dtype=np.float64) / total) if total else math.nan
            bad = np.zeros(n, bool)
            if bad_rows.any():
                bad[np.unique(owner[bad_rows[inverse]])] = True
            norm2 = _dot(grad_w, grad_w) + _dot(grad_b, grad_b) + _dot(grad_rows, grad_rows)
        return TokenPass(
            losses, mean_loss, per_record, lengths, X.attended(), bad, grad_w, grad_b, rows, grad_rows, norm2
        )

    def norm(self) -> float:
        """||(E, W, b)||."""
        squares = _dot(self.embedding, self.embedding) + _dot(self.weight, self.weight)
        return _root(squares + _dot(self.bias, self.bias))

    def step_norm(self, result: TokenPass, lr: float) -> float:
        """||(E, W, b) - lr * gradient||, as sqrt(||θ||² - 2 lr <θ, g> + lr² ||g||²)."""
        with np.errstate(all="ignore"):
            cross = (
                _dot(self.embedding[result.rows], result.grad_rows)
                + _dot(self.weight, result.grad_w)
                + _dot(self.bias, result.grad_b)
            )
            return _root(self.norm() ** 2 - 2 * lr * cross + lr * lr * result.grad_norm2)

    def step(self, result: TokenPass, lr: float) -> None:
        """One SGD update of the float32 master weights (the embedding's used rows only)."""
        rate = np.float32(lr)
        self.embedding[result.rows] -= rate * result.grad_rows
        self.weight -= rate * result.grad_w
        self.bias -= rate * result.grad_b

    def _cast(self, values: np.ndarray) -> np.ndarray:
        if self.precision == "float32":
            return values.astype(np.float32, copy=False)
        return ROUNDING[self.precision](values)


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a.reshape(-1), b.reshape(-1)))


def _root(square: float) -> float:
    if math.isnan(square):
        return square
    return math.sqrt(square) if square > 0 else 0.0


def joined(parts: list[Any]) -> Any:
    """Parts fed to the replay, as one: arrays concatenated, or token `Sequences`."""
    if len(parts) == 1:
        return parts[0]
    if hasattr(parts[0], "targets"):  # token sequences (`scrub.replay.tokens.Sequences`)
        return type(parts[0]).concatenate(parts)
    return np.concatenate(parts)
