#!/usr/bin/env python3
"""Reference outputs of the Hugging Face `tokenizers` library for dspark's tokenizer tests.

For every tokenizer in tests/data/tokenizers/<name>/tokenizer.json.xz this generates (seeded,
deterministic) >= 2,000 varied strings -- prose, code, whitespace runs, numbers, many scripts,
CJK, emoji, embedded special tokens and near misses, random UTF-8 -- plus random id sequences,
and writes tests/data/tokenizers/<name>/cases.jsonl.xz:

  line 1: {"meta": {...}, "added": [[content, id, special], ...]}
          (for a variant, meta.base names the tokenizer and meta.patch the change to apply)
  text cases:   {"text": s, "ids": encode(s, add_special_tokens=False).ids,
                 "ids_special": encode(s, add_special_tokens=True).ids,
                 "decoded": decode(ids_special), "decoded_skip": decode(ids_special, True)}
  decode cases: {"decode_ids": ids, "decoded": decode(ids), "decoded_skip": decode(ids, True)}

Variants (tests/data/tokenizers/<variant>/cases.jsonl.xz, no tokenizer.json of their own) patch a
base tokenizer.json to exercise components none of the six files uses (Metaspace, Digits, other
Split behaviors, Strip/NFD normalizers, lstrip/rstrip/single_word added tokens, no decoder,
decoder chains that cannot stream, unk without byte fallback). The patch is
{"sections": {name: value}, "model": {field: value}, "added_tokens": [entries to append]}.

Run:  python3 tools/tokenizer_goldens.py [--only qwen3] [--count 2400]
Needs: pip install tokenizers (the version is recorded in the meta line).
"""
import argparse
import json
import lzma
import pathlib
import random
import unicodedata
import zlib

import tokenizers
from tokenizers import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tokenizers"
NAMES = ["qwen3", "llama3", "llama3_1", "deepseek_v3", "llama2", "gemma3"]

def added(content, id_, special=False, lstrip=False, rstrip=False, single_word=False,
          normalized=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


VARIANTS = {
    # SentencePiece-era layout: Metaspace pre-tokenizer and decoder, lstrip/rstrip/single_word.
    "llama2_metaspace": {"base": "llama2", "patch": {
        "sections": {
            "normalizer": None,
            "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                              "split": True},
            "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                        "split": True},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}},
                                          {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                               "pair": [], "special_tokens": {
                                   "<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                   "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}},
        "added_tokens": [added("<mask>", 32000, special=True, lstrip=True, rstrip=True),
                         added("[SW]", 32001, single_word=True),
                         added("<sep>", 32002, special=True, rstrip=True),
                         added("Hello", 32003, normalized=True),
                         added("<left>", 32004, lstrip=True)]}},
    # Byte-level with every other pre-tokenizer / normalizer kind and a decoder chain that streams
    # through a fused Replace (two-character pattern) and Strip.
    "qwen3_variants": {"base": "qwen3", "patch": {
        "sections": {
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFD"},
                {"type": "Replace", "pattern": {"Regex": "[ ]{3,}"}, "content": "  "},
                {"type": "Strip", "strip_left": False, "strip_right": True}]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "Split", "pattern": {"Regex": "[,;]"}, "behavior": "Removed", "invert": False},
                {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithNext",
                 "invert": False},
                {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Contiguous", "invert": True},
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                {"type": "Replace", "pattern": {"String": "  "}, "content": "_"},
                {"type": "Strip", "content": " ", "start": 2, "stop": 0}]},
            "post_processor": {"type": "Sequence", "processors": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                {"type": "TemplateProcessing",
                 "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                            {"Sequence": {"id": "A", "type_id": 0}},
                            {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}],
                 "pair": [], "special_tokens": {
                     "<|im_start|>": {"id": "<|im_start|>", "ids": [151644], "tokens": ["<|im_start|>"]},
                     "<|im_end|>": {"id": "<|im_end|>", "ids": [151645], "tokens": ["<|im_end|>"]}}}]}},
        "added_tokens": [added("<|lstrip|>", 151669, special=True, lstrip=True),
                         added("wordy", 151670, single_word=True, normalized=True),
                         added("RSTRIP", 151671, rstrip=True)]}},
    # No decoder (tokens joined by spaces), unknown characters without byte fallback (fused <unk>).
    "llama2_plain": {"base": "llama2", "patch": {
        "sections": {"decoder": None, "post_processor": None},
        "model": {"byte_fallback": False, "fuse_unk": True}}},
    # A decoder chain that cannot be streamed exactly (ByteFallback after Fuse): buffered.
    "llama2_fused": {"base": "llama2", "patch": {
        "sections": {"decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "Fuse"}, {"type": "ByteFallback"}, {"type": "Strip", "content": " ", "start": 1,
                                                          "stop": 0}]}}}},
}


def train_bpe_affixes():
    """A small BPE trained here with continuing_subword_prefix "##" and end_of_word_suffix "</w>"
    (no published file among ours uses them). Training is not bit-reproducible, so the result is
    committed and only retrained with --retrain."""
    from tokenizers import models, pre_tokenizers, trainers
    rng = random.Random(1)
    corpus = [" ".join(rand_word(rng) for _ in range(12)) for _ in range(3000)]
    corpus += ["héllo wörld 123 ünïcödé ñ 你好 😀 " + number(rng) for _ in range(50)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##",
                               end_of_word_suffix="</w>", fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"],
                                  continuing_subword_prefix="##", end_of_word_suffix="</w>",
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok.to_str()


TRAINED = {"bpe_affixes": train_bpe_affixes}


def apply_patch(base, patch):
    """The same transformation as apply_patch() in tests/unit/tokenizer_parity_test.cpp."""
    out = dict(base)
    for key, value in patch.get("sections", {}).items():
        out[key] = value
    if "model" in patch:
        out["model"] = dict(out["model"], **patch["model"])
    if "added_tokens" in patch:
        out["added_tokens"] = list(out["added_tokens"]) + patch["added_tokens"]
    return out


# Chat markup per family, used to build realistic prompts with special tokens.
CHAT = {
    "qwen3": ("<|im_start|>{role}\n{text}<|im_end|>\n", ["<think>\n{text}\n</think>\n\n"]),
    "llama3": ("<|start_header_id|>{role}<|end_header_id|>\n\n{text}<|eot_id|>",
               ["<|begin_of_text|>{text}"]),
    "llama3_1": ("<|start_header_id|>{role}<|end_header_id|>\n\n{text}<|eot_id|>",
                 ["<|begin_of_text|>{text}", "<|python_tag|>{text}<|eom_id|>"]),
    "deepseek_v3": ("<｜{Role}｜>{text}", ["<｜begin▁of▁sentence｜>{text}<｜end▁of▁sentence｜>",
                                           "<think>\n{text}\n</think>"]),
    "llama2": ("[INST] {text} [/INST]", ["<s>{text}</s>", "<<SYS>>\n{text}\n<</SYS>>\n\n"]),
    "bpe_affixes": ("<s>{role}: {text}</s>", ["<s>{text}"]),
    "gemma3": ("<start_of_turn>{role}\n{text}<end_of_turn>\n", ["<bos>{text}<eos>"]),
}

WORDS = """the of and to in is was that for it with as his on be at by had are but from or have
an they which one you were her all she there would their we him been has when who will more no if
out so said what up its about into than them can only other new some could time these two may then
do first any my now such like our over man me even most made after also did many before must
through back years where much your way well down should because each just those people how too
little state good very make world still own see men work long get here between both life being
under never day same another know while last might us great old year off come since against go
came right used take three quantum entropy gradient tokenizer decoding speculative lossless cache
kernel throughput latency benchmark Hopper tensor matrix vector softmax attention""".split()
CONTRACTIONS = ["don't", "I'll", "it's", "WE'RE", "you've", "she'd", "I'M", "they'LL", "can't",
                "Won't", "o'clock", "rock'n'roll", "'s", "'T", "'Re", "l'été", "ſ's", "'ſ"]
SCRIPTS = {
    "latin_accents": "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿœšžßÀÉÎÕÜŁŒŠŽĳǅ",
    "greek": "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩάέήίόύώϊϋΐΰ",
    "cyrillic": "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯіїєґ",
    "arabic": "ابتثجحخدذرزسشصضطظعغفقكلمنهويءآأؤإئىةً ٌ ٍ َ ُ ِ ّ ْ٠١٢٣٤٥٦٧٨٩",
    "hebrew": "אבגדהוזחטיכלמנסעפצקרשתךםןףץ ְ ֱ ֲ ַ ָ ּ",
    "hindi": "अआइईउऊऋएऐओऔकखगघङचछजझञटठडढणतथदधनपफबभमयरलवशषसह ा ि ी ु ू ृ े ै ो ौ ं ः ्०१२३४५६७८९",
    "thai": "กขฃคฅฆงจฉชซฌญฎฏฐฑฒณดตถทธนบปผฝพฟภมยรฤลฦวศษสหฬอฮะัาำิีึืฺุู฿เแโใไๅๆ็่้๊๋์ํ๐๑๒",
    "chinese": "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理世车",
    "japanese": "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんがぎぐげござじずぜぞだぢづでどばびぶべぼぱぴぷぺぽアイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンーッャュョ日本語東京漢字ｱｲｳｴｵﾞﾟ",
    "korean": "가나다라마바사아자차카타파하각난닫랄맘밥삿앙잦찿캌탙팦핳한국어세계안녕하세요감사합니다ᄀᄁ나ᅢᅣᆨᆩ",
    "cjk_edges": "\u4e00\u9fa5\u9fa6\u9fcc\u9fff\u3400\u4db5\U00020000\U0002a6d6\u3040\u309f\u30a0\u30ff\u3005\u3007\uff01\uff1f\u3001\u3002",
}
EMOJI = ["😀", "😂", "🥲", "❤️", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🧑🏿‍💻", "🇺🇸", "🇯🇵", "🇪🇺", "1️⃣", "#️⃣", "©️",
         "🩵", "🫨", "🪿", "🫎", "🙂‍↔️", "🐦‍🔥", "🫩", "🪾", "👩‍❤️‍💋‍👨", "✌🏻", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "☕", "⚡", "🚀", "🤖",
         "\U0001FAE8", "\U0001F6DC", "\U0001FA89"]
WHITESPACE = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", " \n", "  \n",
              "\n ", "\n  ", "\u00a0", "\u3000", "\u2028", "\u2029", "\u180e", "\x0b", "\x0c", "\x85",
              "\u2000", "\u200b", "\ufeff", "\u202f", "\u205f", "\u1680", "\x1c", "\x1f"]
# Characters whose handling depends on Unicode data versions (NFC is Unicode 9.0 in tokenizers,
# regex properties Unicode 16.0 in Oniguruma).
NORMALIZATION_PROBES = [
    "e\u0301", "a\u0302\u0323", "a\u0323\u0302", "\u212b", "\u2126", "\u0958", "\u0344",
    "\u1100\u1161\u11a8", "\uac00\u11a8", "\u1100\u1161", "\U00011935\U00011930", "o\u0308\u0304",
    "\u0041\u030a", "\u00c5\u0301", "q\u0307\u0323", "\u1e9b\u0323", "\u0f73", "\u0fb2\u0f80",
    "\u05d1\u05bc", "\u0627\u0653", "\u0915\u093c", "\u09c7\u09be", "\u0b47\u0b56", "\u0cc6\u0cc2",
    "\u1025\u102e", "\U000110a5\U000110ba", "\U00011347\U0001133e", "\u3099\u304b", "\u304b\u3099",
    "\U0001d15e", "\u2260", "\u226e", "\u0338<", "<\u0338", "\ufb2c", "\u1f80\u0345",
    "\U00016d63\U00016d67", "\U000113c2\U000113c2", "\U000105c9", "\U0001e4d0", "\U00011f04",
    "\U00031350", "\U0002ebf0", "\u1c89\u1c8a", "\U00016d40", "\U00010d4a", "\U0001ccf0",
    "\u0e33", "\u0eb3", "\ufdfa", "\u2161", "\u00bd", "\u00b2", "\u0663", "\uff11", "\U0001d7ce",
]
CODE_PY = ['def f(x):\n    return x * 2\n', 'for i in range(10):\n\tprint(i)\n',
           'class A:\n    """Doc."""\n\n    def __init__(self):\n        self.x = [1, 2, 3]\n',
           'if __name__ == "__main__":\n    main()\n', 'x = {"a": 1, \'b\': 2}  # comment\n',
           'lambda a, b: a ** b // 3 % 7 != 0 and not b\n', '@decorator\nasync def g():\n    await h()\n']
CODE_CPP = ['#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  return 0;\n}\n',
            'template <typename T>\nT max(T a, T b) { return a > b ? a : b; }\n',
            'for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n',
            'auto* p = reinterpret_cast<const uint8_t*>(&x); // cast\n',
            'namespace dspark {\nclass Foo final : public Bar {\n public:\n  ~Foo() override;\n};\n}\n',
            '#define CHECK(x) do { if (!(x)) abort(); } while (0)\n']


def rand_word(rng):
    w = rng.choice(WORDS)
    r = rng.random()
    if r < 0.1:
        return w.capitalize()
    if r < 0.13:
        return w.upper()
    if r < 0.2:
        return rng.choice(CONTRACTIONS)
    return w


def prose(rng):
    out = []
    for _ in range(rng.randint(1, 4)):
        words = [rand_word(rng) for _ in range(rng.randint(3, 18))]
        words[0] = words[0].capitalize()
        s = " ".join(words)
        if rng.random() < 0.3:
            k = rng.randrange(len(words))
            words[k] = rng.choice(['"' + words[k] + '"', "(" + words[k] + ")", words[k] + ",",
                                   words[k] + ";", words[k] + "—", "'" + words[k] + "'"])
            s = " ".join(words)
        out.append(s + rng.choice([".", "!", "?", "...", ":", ""]))
    return rng.choice([" ", "  ", "\n", "\n\n"]).join(out)


def number(rng):
    n = rng.randint(1, 30)
    digits = "".join(rng.choice("0123456789") for _ in range(n))
    forms = [digits, digits[: max(1, n // 2)] + "." + digits[n // 2:], "-" + digits,
             f"{int(digits):,}", digits + "px", "v" + digits[:1] + "." + digits[1:3],
             "abc" + digits + "def", "+1 (" + digits[:3] + ") 555-" + digits[-4:],
             "2024-" + digits[:2] + "-" + digits[-2:], "0x" + digits[:8], digits + "e-" + digits[:2],
             "٣٤٥" + digits[:3], "१२३", "１２３" + digits[:2], "²³", "½", "Ⅻ", "3.14159", "1e10",
             " " + digits, digits + " " + digits, "$" + digits[:4] + ".99", digits[:3] + "%"]
    return rng.choice(forms)


def code(rng):
    r = rng.random()
    if r < 0.35:
        s = rng.choice(CODE_PY)
    elif r < 0.7:
        s = rng.choice(CODE_CPP)
    else:
        def value(depth):
            c = rng.random()
            if depth > 2 or c < 0.3:
                return rng.choice([rng.randint(-1000, 100000), rng.random(), True, None,
                                   rand_word(rng), "line\nbreak", "tab\there", "ünï"])
            if c < 0.65:
                return [value(depth + 1) for _ in range(rng.randint(0, 4))]
            return {rand_word(rng): value(depth + 1) for _ in range(rng.randint(0, 4))}
        s = json.dumps(value(0), indent=rng.choice([None, 2, 4, "\t"]), ensure_ascii=rng.random() < 0.5)
    if rng.random() < 0.3:
        s = s.replace("    ", "\t")
    if rng.random() < 0.2:
        s = s + rng.choice(["   ", "\n\n\n", "  \n", " "])
    return s


def unicode_text(rng):
    script = rng.choice(sorted(SCRIPTS))
    chars = SCRIPTS[script]
    words = ["".join(rng.choice(chars) for _ in range(rng.randint(1, 8))) for _ in range(rng.randint(1, 8))]
    sep = "" if script in ("chinese", "japanese", "thai") and rng.random() < 0.7 else " "
    s = sep.join(words)
    r = rng.random()
    if r < 0.2:
        s = unicodedata.normalize("NFD", s)
    elif r < 0.3:
        s = s + " " + prose(rng)
    elif r < 0.4:
        s = rng.choice(NORMALIZATION_PROBES) + s
    return s


def whitespace(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        parts.append(rng.choice(WHITESPACE) * rng.randint(1, 3))
        if rng.random() < 0.6:
            parts.append(rng.choice([rand_word(rng), number(rng), "x", "!", rng.choice(EMOJI)]))
    return "".join(parts)


def emoji(rng):
    return "".join(rng.choice(EMOJI) + rng.choice(["", "", " ", rand_word(rng)]) for _ in range(rng.randint(1, 6)))


ASSIGNED = None


def random_char(rng):
    global ASSIGNED
    if ASSIGNED is None:
        ASSIGNED = [cp for cp in range(0x110000)
                    if not 0xD800 <= cp < 0xE000 and unicodedata.category(chr(cp)) != "Cn"]
    r = rng.random()
    if r < 0.3:
        return chr(rng.randint(0x20, 0x7E))
    if r < 0.35:
        return chr(rng.randint(0, 0x1F))
    if r < 0.45:
        return chr(rng.randint(0x80, 0x2FF))
    if r < 0.5:
        return chr(rng.choice([0xFFFD, 0xFFFE, 0xFFFF, 0x10FFFF, 0xE000, 0xF8FF, 0x7F, 0x10FFFD]))
    if r < 0.55:
        cp = rng.randint(0, 0x10FFFF)  # anything, including unassigned code points
        return chr(cp) if not 0xD800 <= cp < 0xE000 else "?"
    return chr(rng.choice(ASSIGNED))


def random_utf8(rng):
    return "".join(random_char(rng) for _ in range(rng.randint(1, 40)))


def near_miss(rng, token):
    if len(token) < 2:
        return token + token
    k = rng.randrange(len(token))
    ops = [token[:k] + token[k + 1:], token[:k] + rng.choice("|<>_ xX") + token[k:], token.upper(),
           token[:-1], token[1:], token + token[-1], " " + token + " ", token.replace("|", "｜"),
           token.replace("▁", " "), token.replace("_", "▁")]
    return rng.choice(ops)


def specials_text(rng, name, added):
    turn, extras = CHAT[name]
    r = rng.random()
    if r < 0.35:
        parts = []
        for _ in range(rng.randint(1, 3)):
            role = rng.choice(["system", "user", "assistant", "tool"])
            body = rng.choice([prose, code, unicode_text, number, emoji])(rng)
            parts.append(turn.format(role=role, Role=role.capitalize(), text=body))
        if rng.random() < 0.5:
            parts.append(rng.choice(extras).format(text=prose(rng)))
        return "".join(parts)
    if r < 0.6:
        toks = [rng.choice(added) for _ in range(rng.randint(1, 4))]
        glue = [rng.choice(["", " ", "\n", rand_word(rng), " " + rand_word(rng) + " ", "\n\n", "  "])
                for _ in range(len(toks) + 1)]
        return "".join(g + t for g, t in zip(glue, toks)) + glue[-1]
    if r < 0.85:
        t = rng.choice(added)
        return rng.choice(["", "x", " ", "hello "]) + near_miss(rng, t) + rng.choice(["", "y", " ", "\n"])
    t = rng.choice(added)
    return t * rng.randint(2, 3) + t[: rng.randint(0, len(t))]


def long_text(rng, name, added):
    gens = [prose, code, number, unicode_text, whitespace, emoji]
    parts = [rng.choice(gens)(rng) for _ in range(rng.randint(20, 60))]
    if rng.random() < 0.5:
        parts.insert(rng.randrange(len(parts)), rng.choice(added))
    return rng.choice(["", " ", "\n"]).join(parts)


def single_chars():
    s = [chr(c) for c in range(0, 0x80)]
    s += ["é", "ß", "€", "你", "😀", "\u0301", "\u00a0", "\u3000", "▁", "Ġ", "Ċ", "\ufffd", "\U0010ffff",
          "\u180e", "\u2028", "ſ", "K", "ǅ", "\u0345", "\ufeff", "\u200d"]
    return s


def vocab_text(rng, pieces):
    """Decoded vocabulary entries glued together: real subwords of many languages."""
    return "".join(rng.choice(pieces) + rng.choice(["", "", "", " "]) for _ in range(rng.randint(1, 8)))


def unreachable_tokens(tok_json):
    """Texts of vocabulary tokens that BPE merges cannot build (only ignore_merges yields them)."""
    model = tok_json["model"]
    if not model.get("ignore_merges"):
        return []
    with_merges = Tokenizer.from_str(json.dumps(dict(tok_json, model=dict(model, ignore_merges=False))))
    ignoring = Tokenizer.from_str(json.dumps(tok_json))
    vocab = model["vocab"]
    texts = [ignoring.decode([vocab[t]]) for t in sorted(vocab, key=lambda t: vocab[t])]
    a = ignoring.encode_batch(texts, add_special_tokens=False)
    b = with_merges.encode_batch(texts, add_special_tokens=False)
    return [t for t, x, y in zip(texts, a, b) if x.ids != y.ids]


def generate_strings(name, rng, added, count, pieces, unreachable):
    strings = ["", " ", "  ", "\n", "\n\n\n", "  \n", "hello", "Hello world", " Hello", "Hello ",
               "hello\n\nworld", "a\tb", "trailing spaces   ", "   leading", "\r\n\r\n",
               "The quick brown fox jumps over the lazy dog.", "I'm here, you're there; it's 10:30.",
               "1234567890", "12345678901234567890123456789", "3.14159265358979", "你好，世界！",
               "こんにちは世界", "안녕하세요 세계", "Привет, мир!", "Γειά σου Κόσμε", "مرحبا بالعالم",
               "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "👨‍👩‍👧‍👦🇺🇸👍🏽", "<<<>>>", "<||>", "<|", "|>",
               "\u2581\u2581hello\u2581", "ĠĠ", "<0x41>", "<0xE4><0xBD><0xA0>", "<unk>", "[INST]"]
    strings += NORMALIZATION_PROBES
    strings += single_chars()
    strings += [w + "  " + w for w in WHITESPACE]
    strings += [" " * n for n in range(1, 40, 3)] + ["\n" * n for n in range(1, 12)] + \
               ["\t" * n for n in range(1, 12)] + [" \n" * n for n in range(1, 6)]
    strings += ["9" * n for n in range(1, 25)] + ["1" + "0" * n for n in range(1, 25)]
    strings += sorted(added)[:200]
    for t in rng.sample(unreachable, min(len(unreachable), 120)):
        strings.append(rng.choice(["{}", "x{} y", "{}{}", "{}.", "Hello{} world", "{} 123"]).format(t, t))
    gens = [(vocab_text, 8), (prose, 18), (code, 12), (whitespace, 10), (number, 8), (unicode_text, 14), (emoji, 6),
            (random_utf8, 10), ("specials", 14), ("mix", 8)]
    total = sum(w for _, w in gens)
    while len(strings) < count - 8:
        pick = rng.uniform(0, total)
        for gen, w in gens:
            pick -= w
            if pick <= 0:
                break
        if gen == "specials":
            strings.append(specials_text(rng, name, added))
        elif gen == "mix":
            k = rng.randint(2, 5)
            strings.append("".join(rng.choice([prose, code, whitespace, number, unicode_text, emoji,
                                               random_utf8])(rng) for _ in range(k)))
        elif gen == vocab_text:
            strings.append(vocab_text(rng, pieces))
        else:
            strings.append(gen(rng))
    while len(strings) < count:
        strings.append(long_text(rng, name, added))
    return strings


def decode_cases(rng, tok, texts, n):
    vocab = tok.get_vocab_size(True)
    cases = []
    byte_tokens = [tok.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    byte_tokens = [t for t in byte_tokens if t is not None]
    for i in range(n):
        r = rng.random()
        if r < 0.3:
            ids = [rng.randrange(vocab) for _ in range(rng.randint(1, 24))]
        elif r < 0.55 and byte_tokens:
            ids = [rng.choice(byte_tokens) if rng.random() < 0.7 else rng.randrange(vocab)
                   for _ in range(rng.randint(1, 16))]
        elif r < 0.8:
            # A prefix / middle of a real encoding: cuts through UTF-8 sequences.
            ids = tok.encode(rng.choice(texts), add_special_tokens=True).ids
            if ids:
                a = rng.randrange(len(ids))
                b = rng.randint(a, min(len(ids), a + 30))
                ids = ids[a:b]
        else:
            ids = [rng.randrange(vocab) for _ in range(rng.randint(1, 6))]
            ids += tok.encode(rng.choice(texts), add_special_tokens=True).ids[:10]
            rng.shuffle(ids)
        cases.append({"decode_ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    return cases


def run(name, count, n_decode, retrain=False):
    variant = VARIANTS.get(name)
    base = variant["base"] if variant else name
    if name in TRAINED and (retrain or not (DATA / name / "tokenizer.json.xz").exists()):
        (DATA / name).mkdir(exist_ok=True)
        with lzma.open(DATA / name / "tokenizer.json.xz", "wt", encoding="utf-8",
                       preset=9 | lzma.PRESET_EXTREME) as f:
            f.write(TRAINED[name]())
    raw = lzma.open(DATA / base / "tokenizer.json.xz").read().decode("utf-8")
    tok_json = json.loads(raw)
    if variant:
        patch = variant["patch"]
        tok_json = apply_patch(tok_json, patch)
        raw = json.dumps(tok_json, ensure_ascii=False)
    tok = Tokenizer.from_str(raw)
    seed = zlib.crc32(name.encode()) ^ 0x5EED
    rng = random.Random(seed)
    added_decoder = tok.get_added_tokens_decoder()
    added = sorted(t.content for t in added_decoder.values())
    vocab_ids = sorted(tok_json["model"]["vocab"].values())
    pieces = [tok.decode([i]) for i in rng.sample(vocab_ids, min(5000, len(vocab_ids)))]
    texts = generate_strings(base, rng, added, count, pieces, unreachable_tokens(tok_json))
    cases = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = tok.encode(text, add_special_tokens=True).ids
        cases.append({"text": text, "ids": ids, "ids_special": ids_special,
                      "decoded": tok.decode(ids_special, skip_special_tokens=False),
                      "decoded_skip": tok.decode(ids_special, skip_special_tokens=True)})
    cases += decode_cases(rng, tok, texts, n_decode)
    meta = {"name": name, "tokenizers_version": tokenizers.__version__, "seed": seed,
            "base": base, "patch": patch if variant else None,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "n_text_cases": len(texts), "n_decode_cases": n_decode}
    added_list = sorted([[t.content, i, bool(t.special)] for i, t in added_decoder.items()],
                        key=lambda x: x[1])
    out = DATA / name / "cases.jsonl.xz"
    out.parent.mkdir(exist_ok=True)
    with lzma.open(out, "wt", encoding="utf-8", preset=9 | lzma.PRESET_EXTREME) as f:
        f.write(json.dumps({"meta": meta, "added": added_list}, ensure_ascii=False) + "\n")
        for case in cases:
            f.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"{name}: {len(texts)} text cases + {n_decode} decode cases -> {out} "
          f"({out.stat().st_size / 1e6:.2f} MB)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", action="append", help="tokenizer name(s) to regenerate")
    ap.add_argument("--count", type=int, default=2400, help="text cases per tokenizer")
    ap.add_argument("--decode-count", type=int, default=400, help="decode-only cases")
    ap.add_argument("--variant-count", type=int, default=700, help="text cases per variant")
    ap.add_argument("--retrain", action="store_true", help="retrain the TRAINED tokenizers")
    args = ap.parse_args()
    for name in args.only or NAMES + list(VARIANTS) + list(TRAINED):
        if name in VARIANTS or name in TRAINED:
            run(name, args.variant_count, args.decode_count // 4, args.retrain)
        else:
            run(name, args.count, args.decode_count)


if __name__ == "__main__":
    main()
