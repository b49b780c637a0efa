"""A small byte-level BPE tokenizer trained in the test (``tokenizers``' BpeTrainer, deterministic) on a corpus with
accents and emoji, with the special tokens of a ChatML / Llama-3-shaped chat template."""
from __future__ import annotations

import random

SPECIAL_TOKENS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eot_id|>"]
"""Special tokens, ids 0 .. 6 in this order (``<s>`` bos, ``</s>`` eos)."""

WORDS = ["hello", "world", "café", "naïve", "über", "straße", "garçon", "élève", "déjà", "vu", "the", "model",
         "builds", "a", "recipe", "and", "runs", "it", "fast", "ça", "va", "mañana", "niño", "😀", "🚀", "🎉", "👍🏽",
         "中文", "日本語", "ok", "yes", "no", "stop", "STOP", "end", "user", "assistant", "system", "Ωmega", "π"]


SYLLABLES = ["ka", "ré", "mo", "ñu", "tä", "li", "sø", "be", "gî", "da", "zu", "pé", "ro", "fa", "çi", "ne"]


def corpus(lines: int = 600, seed: int = 0) -> list[str]:
    """Deterministic lines of words from :data:`WORDS` and made-up words of :data:`SYLLABLES` (enough
    variety for a thousand merges)."""
    rng = random.Random(seed)

    def word() -> str:
        if rng.random() < 0.5:
            return rng.choice(WORDS)
        return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4)))

    return [" ".join(word() for _ in range(rng.randint(3, 12))) for _ in range(lines)]


def train_tokenizer(vocab_size: int = 1000):
    """A ``tokenizers.Tokenizer``: byte-level BPE (GPT-2's byte alphabet, so every string encodes), at most
    ``vocab_size`` ids, the special tokens first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=1)
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok
