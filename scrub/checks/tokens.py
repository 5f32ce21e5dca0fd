"""Checks on language-model records: token sequences and the texts they are tokenized from.

A record is judged as the trainer will see it (`token_facts`, computed once per record):
truncated to ``--max-length`` when given, its labels shifted by one position as a causal
language model shifts them (Hugging Face's ``ForCausalLM`` models drop the first label), the
labels equal to the ignore index (-100 unless ``--ignore-index``) left out of the loss. A record
without labels of its own is labelled by its input ids, where its attention mask is 1, as
``DataCollatorForLanguageModeling`` labels it. A text record is tokenized with ``--tokenizer``
when given; without one, only what the text itself tells is judged (an empty text, an empty
answer).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from scrub.checks.base import (
    TOKEN_IGNORE_INDEX,
    CheckOptions,
    Finding,
    make_issue,
    reader_check,
    record_check,
)
from scrub.records import Carries, Issue, Record, Severity, TextParts
from scrub.wording import agreeing, counted

if TYPE_CHECKING:
    from scrub.vocabulary import Vocabulary

#: how many positions a causal language model shifts its labels by (label i is predicted at i - 1)
CAUSAL_SHIFT = 1


@dataclass(slots=True)
class TokenFacts:
    """A record as the trainer sees it."""

    #: input ids after tokenization (None: a text not tokenized), before truncation
    ids: np.ndarray | None
    #: tokens before truncation (None: not known, a text not tokenized)
    length: int | None
    #: labels the loss counts after truncation and the shift (None: not known)
    supervised: int | None
    #: ones in the attention mask after truncation (None: the record has no mask)
    attended: int | None
    #: the record has nothing in it: no token, or every part of its text empty
    empty: bool
    #: what the record's answer is, when it is empty: "completion", "assistant messages"
    empty_answer: str | None
    #: the labels as the loss sees them, before the shift (ignore index where not counted)
    labels: np.ndarray | None


def token_facts(record: Record, options: CheckOptions) -> TokenFacts | None:
    """The record's `TokenFacts`, computed once and kept on the record (None: not a language-model
    record)."""
    facts = record.meta.get("tokens")
    if facts is not None:
        return facts
    kind = record.meta.get("kind")
    if record.payload is None or kind not in ("tokens", "text"):
        return None
    ignore = options.token_ignore_index
    if kind == "tokens":
        ids = cast(np.ndarray, record.payload)
        labels = record.meta.get("token_labels")
        mask = record.meta.get("attention_mask")
        facts = _judged(ids, labels, mask, ignore, options.max_length, None)
    else:
        parts = cast(TextParts, record.payload)
        empty = all(not text for _, text, _ in parts)
        answers = [text for _, text, supervised in parts if supervised]
        empty_answer = None
        if not empty and answers and not any(answers):
            empty_answer = (
                "completion"
                if parts[-1][0] == "completion"
                else "assistant message"
                if len(answers) == 1
                else "assistant messages"
            )
        vocabulary = _vocabulary(options)
        if vocabulary is None or vocabulary.tokenizer is None:
            supervised = 0 if not empty and not any(answers) else None
            facts = TokenFacts(None, None, supervised, None, empty, empty_answer, None)
        else:
            ids, labels = vocabulary.tokenize(parts, ignore if ignore is not None else TOKEN_IGNORE_INDEX)
            facts = _judged(ids, labels, None, ignore, options.max_length, empty_answer)
            facts.empty = empty
    record.meta["tokens"] = facts
    return facts


def _judged(
    ids: np.ndarray,
    labels: np.ndarray | None,
    mask: np.ndarray | None,
    ignore: int | None,
    max_length: int | None,
    empty_answer: str | None,
) -> TokenFacts:
    length = len(ids)
    cut = length if max_length is None else min(length, max_length)
    attended = None if mask is None else int(np.count_nonzero(mask[:cut]))
    if labels is None:
        seen = ids[:cut]
        counted = cut if mask is None else int(np.count_nonzero(mask[:cut]))
        first_counted = 1 if mask is None or (cut and mask[0]) else 0
        supervised = max(0, counted - first_counted)
    else:
        seen = labels[:cut]
        shifted = seen[CAUSAL_SHIFT:]
        supervised = len(shifted) if ignore is None else int(np.count_nonzero(shifted != ignore))
    return TokenFacts(ids, length, supervised, attended, length == 0, empty_answer, seen)


def tally_tokens(facts: TokenFacts, stats: dict[str, Counter]) -> None:
    """Count the record into the summary's ``tokens`` statistics, which the notes read
    (`token_notes`): how many records were judged on tokens, and how many have no supervised one."""
    counts = stats["tokens"]
    counts["records"] += 1
    if facts.ids is None:
        counts["untokenized texts"] += 1
    nothing = facts.empty or facts.empty_answer is not None or facts.supervised == 0
    if facts.supervised is not None or nothing:
        counts["judged for supervision"] += 1
        if nothing:  # whichever check names the cause (an empty one, a mask of zeros, all ignored)
            counts["without a supervised token"] += 1


def tally_token_rows(lengths: np.ndarray, stats: dict[str, Counter]) -> None:
    """`tally_tokens` for a batch of a flat token store's documents (`TokenRows`)."""
    stats["tokens"]["records"] += len(lengths)  # packed into samples: supervision is the samples'


def token_notes(
    counts: Counter | None, options: CheckOptions, origin: Callable[[str], str], batch_size: int | None
) -> list[str]:
    """What a person should know about how a scan judged its language-model records: the ignore
    index that applied, what was not checked for want of a vocabulary or a tokenizer, and the
    share of records the loss learns nothing from, with the chance that a whole batch is such."""
    if not counts or not counts.get("records"):
        return []
    notes = []
    judged = counts.get("judged for supervision", 0)
    if judged:  # records with labels (or labelled by their ids) the loss counts
        ignore = options.token_ignore_index
        how = "by default for token labels" if options.ignore_index == "auto" else origin("ignore-index")
        applied = f"ignore index {ignore} ({how})" if ignore is not None else "every label counts"
        notes.append(f"token labels: {applied}")
    vocabulary = _vocabulary(options)
    if vocabulary is not None:
        notes += vocabulary.notes
    if options.vocab_size is None:
        notes.append(
            "token-out-of-range: no vocabulary size (--vocab-size, or --tokenizer with a config.json): "
            "only negative ids were checked"
        )
    untokenized = counts.get("untokenized texts", 0)
    if untokenized:
        why = (
            "--tokenizer needs the tokenizers library: pip install 'scrub[text]'"
            if options.tokenizer is not None
            else "give --tokenizer to judge them as the trainer will"
        )
        notes.append(
            f"{counted(untokenized, 'text record')} judged untokenized: lengths and supervised tokens were "
            f"not counted, only empty texts and empty answers found ({why})"
        )
    unsupervised = counts.get("without a supervised token", 0)
    if judged and unsupervised:
        share = unsupervised / judged
        size = batch_size or DEFAULT_BATCH
        chance = share**size
        where = "--batch-size" if batch_size else "--batch-size with --dummy-loss sets it"
        notes.append(
            f"{unsupervised:,} of {counted(judged, 'token record')} ({share:.1%}) "
            f"{agreeing(unsupervised, 'has', 'have')} no token the loss counts "
            "(empty-sequence, empty-attention, no-supervised-tokens): a batch of "
            f"{size} ({where}) drawn at random holds nothing else with probability {chance:.2g}, "
            "and its mean loss is NaN"
        )
    return notes


#: the batch the share of unsupervised records is turned into a chance for, without --batch-size
DEFAULT_BATCH = 64


def _vocabulary(options: CheckOptions) -> Vocabulary | None:
    if options.tokenizer is None:
        return None
    from scrub.vocabulary import load_vocabulary

    return load_vocabulary(options.tokenizer)


@record_check("empty-sequence", Severity.ERROR, needs=Carries.TOKENS)
def empty_sequence(record: Record, options: CheckOptions) -> Finding | None:
    """A sequence without a token, a text without a character, or an empty answer.

    What it finds:
        Token records whose `input_ids` are empty; texts, prompt/completion pairs and chats whose
        every part is empty; records whose answer (the completion, the assistant's messages) is
        empty while the prompt is not.
    Why it breaks training:
        An empty sequence makes an empty batch row: a loss averaged over zero tokens is 0/0 =
        NaN, and some collators raise on it. An empty answer trains the model to say nothing, or,
        with a completion-only loss, leaves it nothing to learn from (NaN as below).
    Example:
        `train.jsonl` line 12 is `{"prompt": "Summarize:", "completion": ""}`.
    What fix does:
        Moves the record to the quarantine.
    """
    facts = token_facts(record, options)
    if facts is None:
        return None
    if facts.empty:
        if facts.ids is not None and facts.length == 0:
            return Finding("empty sequence: no token")
        return Finding(
            "empty text: every part is empty",
            {"parts": [role for role, _, _ in cast(TextParts, record.payload)]},
        )
    if facts.empty_answer is not None:
        verb = "are" if facts.empty_answer.endswith("s") else "is"  # the assistant messages are empty
        return Finding(f"empty answer: the {facts.empty_answer} {verb} empty", {"part": facts.empty_answer})
    return None


@record_check("no-supervised-tokens", Severity.ERROR, needs=Carries.SEQUENCES)
def no_supervised_tokens(record: Record, options: CheckOptions) -> Finding | None:
    """A sequence whose labels leave the loss nothing to count: every label the ignore index.

    What it finds:
        Records with no label that the loss counts, judged as the trainer counts them: after
        truncation to `--max-length` (when given), after a causal model's one-position shift (a
        record whose only counted label is at position 0 has none), labels equal to
        `--ignore-index` (-100 by default) left out. Mostly prompts so long that truncation cut
        the whole answer away, chats without an assistant message, and padding-only rows.
    Why it breaks training:
        `cross_entropy(..., ignore_index=-100)` over zero counted labels is a mean over nothing:
        NaN, while the gradients stay finite, so nothing stops the run. Some trainers even log
        the loss as 0.0.
    Example:
        `sft.jsonl` line 88 has a 3,000-token prompt and `--max-length 2048`: its answer starts
        after the cut.
    What fix does:
        Moves the record to the quarantine.
    """
    facts = token_facts(record, options)
    if facts is None or facts.empty or facts.empty_answer is not None or facts.supervised != 0:
        return None
    if facts.attended == 0 and "token_labels" not in record.meta:
        return None  # labelled by its mask, which is empty: `empty-attention` names the cause
    details: dict = {"length": facts.length}
    if options.max_length is not None and facts.length is not None and facts.length > options.max_length:
        details["max_length"] = options.max_length
        return Finding(
            f"no supervised token within the first {options.max_length} (--max-length) of "
            f"{facts.length} tokens: the loss over it is NaN",
            details,
        )
    if facts.ids is None:
        return Finding("no supervised part: nothing the loss counts (no answer, no assistant message)")
    if "token_labels" not in record.meta and facts.length == 1:
        return Finding(ONE_TOKEN, details)
    return Finding("no supervised token: every label the loss counts is the ignore index", details)


#: said of a store whose documents training packs into samples of its own (Megatron's GPTDataset,
#: nanoGPT's random windows): a document's length and supervision are not a sample's
PACKED = (
    "a record is a document (or a window) that training packs into samples of its own: "
    "no-supervised-tokens, empty-attention and sequence-too-long judge samples and do not run here; "
    "token ids and empty documents are checked"
)

#: why a sequence of one token, labelled by its input ids, has no supervised token
ONE_TOKEN = "one token: nothing left to predict once a causal model shifts its labels (a NaN loss)"


@record_check("empty-attention", Severity.ERROR, needs=Carries.SEQUENCES)
def empty_attention(record: Record, options: CheckOptions) -> Finding | None:
    """An attention mask with no 1: a sequence with nothing to attend to.

    What it finds:
        Token records whose `attention_mask` (within `--max-length`, when given) holds no 1.
    Why it breaks training:
        A fully masked row makes every attention score -inf; its softmax is 0/0 = NaN
        (`nn.MultiheadAttention` with a fully padded key mask returns NaN), and the NaN spreads
        to the whole batch through the next normalization.
    Example:
        `train.parquet` row 7 has `attention_mask` `[0, 0, 0, 0]`.
    What fix does:
        Moves the record to the quarantine.
    """
    facts = token_facts(record, options)
    if facts is None or facts.attended != 0 or facts.empty:
        return None
    return Finding("attention mask has no 1: nothing to attend to", {"length": facts.length})


@record_check("token-out-of-range", Severity.ERROR, needs=Carries.TOKENS)
def token_out_of_range(record: Record, options: CheckOptions) -> Finding | None:
    """A token id or label < 0 or >= the vocabulary size (`--vocab-size` or `--tokenizer`).

    What it finds:
        Input ids and labels (other than the ignore index) outside the model's embedding:
        negative ids, and ids at or above the vocabulary size, from a tokenizer that does not
        match the model, tokens added without resizing the embedding, or a store too narrow for
        the vocabulary. Without a vocabulary size only negative ids are found (the summary says
        so).
    Why it breaks training:
        The embedding lookup of such an id raises `IndexError: index out of range in self` on
        CPU, and a device-side assert that kills the whole run on a GPU; an out-of-range label
        fails `cross_entropy` the same way.
    Example:
        `tokens.bin` document 4,210 holds id 50,304 and `--vocab-size 50257`.
    What fix does:
        Moves the record to the quarantine.
    """
    facts = token_facts(record, options)
    if facts is None or facts.ids is None or facts.empty:
        return None
    vocabulary = options.vocab_size if options.vocab_size is not None else vocabulary_size(options)
    for what, values in (("token id", facts.ids), ("label", record.meta.get("token_labels"))):
        if values is None or not len(values):
            continue
        if what == "label" and options.token_ignore_index is not None:
            values = values[values != options.token_ignore_index]
            if not len(values):
                continue
        low, high = int(values.min()), int(values.max())
        if low < 0:
            position = int(np.argmax(values < 0))
            return Finding(f"{what} {low} is negative", {"what": what, "value": low, "position": position})
        if vocabulary is not None and high >= vocabulary:
            position = int(np.argmax(values >= vocabulary))
            return Finding(
                f"{what} {high} >= vocabulary size {vocabulary}",
                {"what": what, "value": high, "position": position, "vocab_size": vocabulary},
            )
    return None


def vocabulary_size(options: CheckOptions) -> int | None:
    vocabulary = _vocabulary(options)
    return None if vocabulary is None else vocabulary.size


@record_check("sequence-too-long", Severity.WARNING, needs=Carries.SEQUENCES)
def sequence_too_long(record: Record, options: CheckOptions) -> Finding | None:
    """A sequence longer than `--max-length` (a warning), or than `--max-positions` (an error).

    What it finds:
        Token sequences (and, with `--tokenizer`, texts) longer than the length the trainer
        truncates or packs to, and those longer than the model's position embeddings.
    Why it breaks training:
        Beyond `--max-length` a trainer truncates silently: what is cut off is never learned
        (and may have been the whole answer: see `no-supervised-tokens`). Beyond the model's
        positions, the position lookup fails as an out-of-range token does: an `IndexError`, or
        a device-side assert on a GPU.
    Example:
        `train.jsonl` line 3 has 9,000 tokens, `--max-length 4096`.
    What fix does:
        With `--severity warning`, moves the record to the quarantine; by default (errors
        only), keeps it unless it exceeds `--max-positions`.
    """
    facts = token_facts(record, options)
    if facts is None or facts.length is None:
        return None
    positions = options.max_positions if options.max_positions is not None else model_positions(options)
    truncates = options.max_length is not None and facts.length > options.max_length
    if positions is not None and facts.length > positions and not truncates:
        return Finding(
            f"{facts.length} tokens > the model's {positions} positions",
            {"length": facts.length, "max_positions": positions},
            severity=Severity.ERROR,
        )
    if truncates:
        return Finding(
            f"{facts.length} tokens > --max-length {options.max_length}: "
            "truncated, the rest is never learned",
            {"length": facts.length, "max_length": options.max_length},
        )
    return None


def model_positions(options: CheckOptions) -> int | None:
    vocabulary = _vocabulary(options)
    return None if vocabulary is None else vocabulary.max_positions


#: a store's integer dtypes, and the largest id each holds
STORE_LIMITS = {
    "uint8": 255,
    "int8": 127,
    "int16": 32767,
    "uint16": 65535,
    "int32": 2**31 - 1,
    "uint32": 2**32 - 1,
}

reader_check(
    "token-dtype-overflow",
    Severity.ERROR,
    """A token store whose integer type cannot hold the vocabulary: a whole file is wrong.

    What it finds:
        Token files stored in a dtype narrower than the vocabulary needs: uint16 (ids up to
        65,535) for a vocabulary of 100,277 (`--vocab-size` or `--tokenizer`). Megatron, nanoGPT
        and llm.c write uint16 for small vocabularies; a larger tokenizer later writes through
        the same code.
    Why it breaks training:
        Every id above the dtype's range was wrapped around when the file was written: the model
        trains on wrong tokens without an error, and no single record looks out of range. The
        loss stalls or diverges.
    Example:
        `tokens.bin` is uint16 and `--vocab-size 128256`.
    What fix does:
        Sets the whole file aside (nothing in it can be trusted): re-tokenize into a wider dtype
        (uint32; the message names it). Where that would empty the cleaned copy (a single token
        file) or set more than half of it aside, `fix` refuses: exit 2, one line naming the
        check and what to do.
    """,
    needs=Carries.TOKENS,
)

reader_check(
    "malformed-record",
    Severity.ERROR,
    """A record that is not what its format holds: a line that is not JSON, fields of the wrong type.

    What it finds:
        A JSON Lines line that does not parse (a cut-off write, a stray log line), a value that
        is not an object, a record with none of the fields a language-model record has (`text`,
        `messages`, `prompt`/`completion`, `input_ids`), or one whose `input_ids` are not
        integers; a TFRecord record that is not a `tf.Example`, or has no feature to train on.
    Why it breaks training:
        A loader raises on it mid-epoch (`json.JSONDecodeError`, a collator's `KeyError`),
        hours into a run, or a trainer that skips it silently trains on less than you think.
    Example:
        `train.jsonl` line 5,001 is `{"text": "the quick brown` (the write stopped there).
    What fix does:
        Moves the record to the quarantine, as its bytes: nothing is lost.
    """,
    needs=Carries.ANY,  # not only language-model records: TFRecord's Examples too
)


def dtype_overflows(token_dtypes: dict[str, str], options: CheckOptions) -> list[Issue]:
    """`token-dtype-overflow` of each token file whose dtype cannot hold the vocabulary (known from
    `--vocab-size` or `--tokenizer`), as dataset-wide issues (key ``*``)."""
    vocabulary = options.vocab_size if options.vocab_size is not None else vocabulary_size(options)
    if vocabulary is None:
        return []
    issues = []
    for source, dtype in token_dtypes.items():
        limit = STORE_LIMITS.get(dtype)
        if limit is not None and vocabulary - 1 > limit:
            issues.append(
                make_issue(
                    "token-dtype-overflow",
                    source,
                    "*",
                    None,
                    Finding(
                        f"{dtype} holds ids up to {limit:,}, the vocabulary has {vocabulary:,}: ids above "
                        f"{limit:,} were wrapped when this file was written; re-tokenize into "
                        f"{'uint32' if vocabulary - 1 <= STORE_LIMITS['uint32'] else 'int64'}",
                        {"dtype": dtype, "vocab_size": vocabulary},
                    ),
                )
            )
    return issues
