"""A tiny byte-level BPE tokenizer (Qwen-style pre-tokenizer) for the golden fixtures.

Trained with the `tokenizers` package on text shipped with Python itself (the Zen of Python,
`this` module, PSF licence) plus a few paragraphs written for this tool. The vocabulary is
exactly `vocab_size` entries: 256 byte symbols, learned merges, then the special tokens at the
end (as in Qwen checkpoints), so the special ids are vocab_size-3 .. vocab_size-1.
"""

from __future__ import annotations

import codecs
import contextlib
import io

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# The split pattern of Qwen2/Qwen3 tokenizers (GPT-4 style, digits one at a time).
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Written for this tool (no third-party text).
OWN_TEXT = """\
A speculative decoder guesses several tokens at once and lets the large model check them all in a
single pass. When the guesses are right, the answer arrives sooner; when they are wrong, nothing is
lost, because the large model has the final word on every token.
The river ran past the old mill, where the miller counted sacks of grain: 12 sacks on Monday,
7 on Tuesday, and 30 by the end of the week. "Slow and steady," he said, "fills the store."
Small models are cheap to run and easy to test. We build them with random weights, write their
outputs to disk, and compare every number our engine computes with the numbers the reference
library computed for the same weights and the same prompts.
def add(a, b):
    return a + b
for i in range(10):
    print(i, add(i, i * 2))
"""


def zen_of_python() -> str:
    """The Zen of Python, from the standard library's `this` module (decoded quietly)."""
    with contextlib.redirect_stdout(io.StringIO()):
        import this  # noqa: F401  (prints the text on first import)
    return codecs.decode(this.s, "rot13")


def training_text() -> list[str]:
    return [zen_of_python(), OWN_TEXT]


def build_tokenizer(vocab_size: int) -> Tokenizer:
    n_regular = vocab_size - len(SPECIAL_TOKENS)
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=n_regular,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    if tok.get_vocab_size() != n_regular:
        raise RuntimeError(
            f"tokenizer training produced {tok.get_vocab_size()} tokens, wanted {n_regular}: "
            "add training text or lower min_frequency"
        )
    tok.add_special_tokens(SPECIAL_TOKENS)
    assert tok.get_vocab_size() == vocab_size
    for i, s in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(s) == n_regular + i
    return tok


if __name__ == "__main__":
    t = build_tokenizer(384)
    enc = t.encode("<|im_start|>user\nHello, world! 123 sacks<|im_end|>\n")
    print(enc.tokens)
    print(enc.ids)
