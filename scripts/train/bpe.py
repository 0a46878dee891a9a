"""A byte-level BPE tokenizer: trainer, encoder and a HF `tokenizer.json` writer.

The pre-tokenizer is GPT-2's split (the regex HF's ByteLevel pre-tokenizer applies with
use_regex=true), implemented as a scanner over Unicode categories because Python's `re`
has no \\p{L} / \\p{N}. Bytes map to printable characters with GPT-2's byte table, as HF's
ByteLevel does, so merges and vocabulary are plain strings in tokenizer.json.
"""

import collections
import unicodedata

CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")


def _bytes_to_unicode():
    printable = list(range(ord("!"), ord("~") + 1))
    printable += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = _bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def _is_letter(c):
    return unicodedata.category(c).startswith("L")


def _is_number(c):
    return unicodedata.category(c).startswith("N")


def _is_other(c):
    return not (c.isspace() or _is_letter(c) or _is_number(c))


def pretokenize(text):
    """Splits like `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`."""
    pieces, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "'":
            hit = next((s for s in CONTRACTIONS if text.startswith(s, i + 1)), None)
            if hit is not None:
                pieces.append(text[i : i + 1 + len(hit)])
                i += 1 + len(hit)
                continue
        start = i
        j = i + 1 if c == " " and i + 1 < n and not text[i + 1].isspace() else i
        matched = False
        for klass in (_is_letter, _is_number, _is_other):
            if j < n and klass(text[j]):
                k = j
                while k < n and klass(text[k]):
                    k += 1
                pieces.append(text[start:k])
                i, matched = k, True
                break
        if matched:
            continue
        k = i
        while k < n and text[k].isspace():
            k += 1
        # \s+(?!\S): a run before a non-space gives up its last character to the next piece.
        end = k if k == n or k - i == 1 else k - 1
        pieces.append(text[i:end])
        i = end
    return pieces


def to_symbols(piece):
    return "".join(BYTE_TO_CHAR[b] for b in piece.encode("utf-8"))


def train(texts, vocab_size, specials):
    """Returns (vocab: token -> id, merges: [(a, b)]). Ids: 256 bytes, merges, then specials."""
    words = collections.Counter()
    for t in texts:
        for p in pretokenize(t):
            words[to_symbols(p)] += 1
    seqs = [list(w) for w in words]
    freqs = list(words.values())
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for wi, s in enumerate(seqs):
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += freqs[wi]
            where[(a, b)].add(wi)
    vocab = {BYTE_TO_CHAR[b]: b for b in range(256)}
    merges = []
    while len(vocab) + len(specials) < vocab_size and pairs:
        # Most frequent pair; ties broken by the pair's strings so training is deterministic.
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pairs[best] <= 0:
            break
        merged = best[0] + best[1]
        merges.append(best)
        vocab[merged] = len(vocab)
        for wi in list(where[best]):
            s, f = seqs[wi], freqs[wi]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] -= f
                where[(a, b)].discard(wi)
            out, k = [], 0
            while k < len(s):
                if k + 1 < len(s) and s[k] == best[0] and s[k + 1] == best[1]:
                    out.append(merged)
                    k += 2
                else:
                    out.append(s[k])
                    k += 1
            seqs[wi] = out
            for a, b in zip(out, out[1:]):
                pairs[(a, b)] += f
                where[(a, b)].add(wi)
        for p in [p for p, c in pairs.items() if c <= 0]:
            del pairs[p]
            where.pop(p, None)
    for s in specials:
        vocab[s] = len(vocab)
    return vocab, merges


class Encoder:
    def __init__(self, vocab, merges, bos=None):
        self.vocab = vocab
        self.ranks = {pair: r for r, pair in enumerate(merges)}
        self.bos = bos
        self.cache = {}

    def _bpe(self, symbols):
        parts = list(symbols)
        while len(parts) > 1:
            ranked = [(self.ranks.get((a, b), None), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            ranked = [(r, i) for r, i in ranked if r is not None]
            if not ranked:
                break
            _, i = min(ranked)
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        return parts

    def encode(self, text, add_bos=True):
        ids = [self.vocab[self.bos]] if add_bos and self.bos is not None else []
        for piece in pretokenize(text):
            sym = to_symbols(piece)
            if sym not in self.cache:
                self.cache[sym] = [self.vocab[p] for p in self._bpe(sym)]
            ids.extend(self.cache[sym])
        return ids

    def decode(self, ids):
        inv = {i: t for t, i in self.vocab.items()}
        data = bytearray()
        for i in ids:
            tok = inv[i]
            if all(ch in CHAR_TO_BYTE for ch in tok):
                data.extend(CHAR_TO_BYTE[ch] for ch in tok)
        return data.decode("utf-8", errors="replace")


def tokenizer_json(vocab, merges, bos, eos):
    special = [
        {
            "id": vocab[t],
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t in (bos, eos)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": bos, "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }
