"""Broad chat training prompts for make_prompts.py --extend (--broad-fraction): the categories of
everyday chat that the stdlib and template sources miss (issue 39).

  broad:writing     forms (poem, letter, speech, review, ...) x subjects x constraints
  broad:roleplay    personas x situations
  broad:reasoning   generated puzzles: orderings, syllogisms, sequences, clock and calendar
                    arithmetic, set counting, rate problems (random names and numbers)
  broad:math        generated exercises: equations, systems, quadratics, percentages, geometry,
                    probability, fractions, divisibility, derivatives and integrals of polynomials
  broad:extraction  generated passages (orders, meeting notes, timetables, contacts, reviews,
                    recipes, event notices) with an extraction instruction
  broad:stem, broad:humanities   topics x question phrasings (with chat_topics.py's lists)
  debian:<section>  English descriptions of Debian packages (debian_descriptions.py; committed as
                    data/debian_descriptions.jsonl.xz) under summarise / explain / extract /
                    write instructions

Licences: the lists and generators are written for dspark (the repository's licence); the Debian
descriptions are part of the packaging of free software in Debian `main` (DFSG), distributed by
every Debian mirror. Multi-turn conversations come from self_instruct.py (they need the target's
own first answers).

No prompt may overlap the held-out evaluation set (tools/eval/data/chat_eval.jsonl): candidates
that equal, contain, or share >= 0.5 of their word 3-grams with an evaluation prompt are dropped
here, and tools/eval/check_overlap.py checks the generated set.
"""
import json
import lzma
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEBIAN = os.path.join(HERE, "data", "debian_descriptions.jsonl.xz")
EVAL_SET = os.path.join(HERE, "..", "eval", "data", "chat_eval.jsonl")

NAMES = ["Ava", "Liam", "Noah", "Emma", "Mia", "Lucas", "Zoe", "Omar", "Ines", "Kenji", "Priya",
         "Mateo", "Hana", "Felix", "Sara", "Jonas", "Leila", "Diego", "Nora", "Tariq", "Elena",
         "Yusuf", "Clara", "Ravi", "Greta", "Malik", "Aiko", "Bruno", "Freya", "Idris"]
CITIES = ["Lyon", "Kyoto", "Porto", "Denver", "Tallinn", "Accra", "Hobart", "Quito", "Bergen",
          "Cork", "Izmir", "Perth", "Graz", "Utrecht", "Malaga", "Turku", "Ghent", "Halifax"]

# ---- writing --------------------------------------------------------------------------------------
WRITING_FORMS = [
    "a short poem", "a sonnet", "a free-verse poem", "a short story", "a fairy tale",
    "a formal letter", "a friendly letter", "an email", "a short speech", "a product description",
    "a restaurant review", "a book review", "a diary entry", "a blog post introduction",
    "a slogan and a tagline", "a toast", "an announcement", "a news report", "a song chorus",
    "a limerick", "a short essay", "a eulogy", "a postcard message", "an advertisement",
    "a persuasive paragraph", "a scene of dialogue", "a museum placard", "a weather report",
    "a recipe introduction", "a travel guide paragraph", "a motivational note", "a riddle",
]
WRITING_SUBJECTS = [
    "a lighthouse keeper's last night on duty", "a city library at closing time",
    "a dog who learns to surf", "moving to a new country", "the smell of fresh bread",
    "a grandmother's garden", "an old bicycle", "the night before an exam", "a broken clock",
    "the first day at a new job", "a village festival", "a robot that paints", "a train station at "
    "dawn", "a forgotten birthday", "a thunderstorm over the sea", "learning to play the piano",
    "a family road trip", "a community vegetable garden", "a solar-powered boat", "a lost glove",
    "a chess tournament", "a mountain village in winter", "a second-hand bookshop",
    "a marathon runner's last mile", "a new coffee machine at the office", "a school science fair",
    "the ocean at night", "a street musician", "a cat that guards a bakery", "an empty stadium",
    "a hot air balloon ride", "recycling at home", "a local football club", "a kite festival",
    "an astronaut's first morning in orbit", "a houseplant that will not grow", "a wedding cake",
    "a quiet Sunday morning", "a startup's first customer", "the end of summer holidays",
]
WRITING_CONSTRAINTS = [
    "", "", " in about 100 words", " for young children", " in a humorous tone",
    " in a serious tone", " in three short paragraphs", " from the point of view of an old man",
    " using simple words", " that ends with a surprise", " in the present tense",
    " with a hopeful ending", " that rhymes", " as if written in the 1800s",
]

# ---- roleplay -------------------------------------------------------------------------------------
PERSONAS = [
    "a lighthouse keeper", "a Victorian butler", "a cheerful airline pilot", "a retired sea captain",
    "a nervous first-time teacher", "a dragon who collects books", "an alien anthropologist",
    "a 1920s newspaper reporter", "a strict but fair football coach", "a forest elf",
    "a hotel concierge", "a beekeeper", "a submarine commander", "a Roman merchant",
    "a veterinarian", "a friendly ghost in an old house", "a mountain guide", "a jazz musician",
    "a lunar base engineer", "a medieval blacksmith", "a game show host", "a kindergarten teacher",
    "a pharmacist", "a sushi chef", "a tax advisor", "a chess grandmaster", "a radio DJ",
    "a deep-sea diver", "a pirate's parrot", "an ice cream truck driver", "a castle's cook",
    "a personal stylist", "a weather forecaster", "a zookeeper", "a bank teller in a western town",
    "a philosopher in ancient Athens", "a gardening expert", "a sleepy owl", "a tech support agent",
]
SITUATIONS = [
    "Greet a new visitor and explain what you do every day.",
    "A customer is unhappy and wants a refund. Respond to them.",
    "Describe the most memorable day of your career.",
    "Give advice to a young person who wants to do your job.",
    "Someone asks you for directions to the nearest train station. Answer in character.",
    "Explain the rules of your workplace to a newcomer.",
    "Tell a short story about a mistake you once made and what you learned.",
    "Convince a sceptical person that your job is the most important one in town.",
    "Describe what you see around you right now.",
    "A child asks you why you chose this life. Answer them.",
    "Write a short note to leave for your replacement on their first day.",
    "Announce some unexpected news to the people around you.",
    "Describe your favourite tool and why you could not work without it.",
    "React to a sudden power cut in the middle of your work.",
    "Interview me as if I were applying to be your assistant.",
    "Explain a tradition that people in your profession follow.",
]

# ---- stem / humanities ----------------------------------------------------------------------------
STEM_TOPICS = [
    "tectonic plates", "the immune system", "nuclear fusion", "plate glass manufacturing",
    "wind turbines", "electric cars", "lithium-ion batteries", "the human eye", "volcanoes",
    "ocean currents", "antibiotic resistance", "the periodic table", "magnets", "sound waves",
    "fibre-optic cables", "the Moon's phases", "coral reefs", "evolution by natural selection",
    "the nervous system", "compilers", "encryption", "the internet's routing", "3D printing",
    "radioactive decay", "enzymes", "the carbon cycle", "superconductors", "microwaves",
    "vaccines against the flu", "the kidneys", "jet engines", "semiconductors", "tides",
    "friction", "the Doppler effect", "stem cells", "comets", "hurricanes", "the ozone layer",
    "quantum computers", "gravity on other planets", "batteries in phones", "bridges",
    "water treatment plants", "the speed of sound", "the digestive system", "clouds",
    "bird migration", "earthworms and soil", "the Big Bang", "electric circuits",
    "machine translation", "blood types", "bioluminescence", "geothermal energy",
]
STEM_PHRASES = [
    "How does {t} work?", "Explain {t} to a twelve-year-old.",
    "What are the most common misconceptions about {t}?",
    "Why is {t} important for everyday life?", "Give three surprising facts about {t}.",
    "What did scientists get wrong about {t} in the past?",
    "Describe {t} in one paragraph, then give an example.",
    "What questions do researchers still ask about {t}?",
    "Summarise the science of {t} in five bullet points.",
    "How would you demonstrate {t} with a simple experiment at home?",
]
HUMANITIES_TOPICS = [
    "the fall of the Western Roman Empire", "the Meiji Restoration", "the invention of paper",
    "the Hanseatic League", "the Harlem Renaissance", "Greek tragedy", "the Reformation",
    "the Mali Empire", "existentialism", "the Enlightenment", "impressionist painting",
    "the Cold War", "the abolition of slavery", "the Byzantine Empire", "haiku poetry",
    "the history of the Olympic Games", "the Marshall Plan", "Confucianism", "the Aztec calendar",
    "Gothic architecture", "the invention of the telephone", "the Viking Age",
    "opportunity cost in economics", "the history of money", "Shakespeare's comedies",
    "the Universal Declaration of Human Rights", "the Mongol Empire", "Baroque music",
    "the women's suffrage movement", "oral storytelling traditions", "the Great Depression",
    "the history of chess", "Buddhist philosophy", "the Ottoman Empire", "modernist novels",
    "the history of cartography", "public libraries", "the scientific revolution",
    "the ethics of lying", "free will", "minimalism in design", "the history of jazz",
]
HUMANITIES_PHRASES = [
    "What should everyone know about {t}?", "Explain the causes and consequences of {t}.",
    "Why do historians still debate {t}?", "How did {t} influence the world today?",
    "Write a short introduction to {t} for a high school class.",
    "What are the key ideas behind {t}?", "Describe {t} in three paragraphs.",
    "Who were the important people connected with {t}, and what did they do?",
    "Compare {t} with something similar from another part of the world.",
    "What can we learn from {t}?",
]

# ---- Debian package descriptions -------------------------------------------------------------------
DEBIAN_TEMPLATES = [
    "Here is the description of the software package {p}:\n\n{d}\n\nSummarise what it does in "
    "two sentences.",
    "Package: {p} ({s})\n\n{d}\n\nWho would use this software, and for what?",
    "Read this description of {p}:\n\n{d}\n\nList its main features as bullet points.",
    "{d}\n\nExplain to a beginner what {p} is and why someone might install it.",
    "Write a short blog post announcing {p}, based on this description:\n\n{d}",
    "Extract from this text the program's name, what kind of tool it is, and any file formats "
    "or technologies it mentions, as JSON:\n\n{d}",
    "I am choosing between tools. What problem does {p} solve?\n\n{d}",
    "Rewrite this package description in simpler words:\n\n{d}",
    "What is {p}? The package says: \"{s}\". Explain it in plain language.",
    "Write three questions a new user might ask about {p}, and answer them from this "
    "description:\n\n{d}",
]


def debian_rows() -> list:
    if not os.path.exists(DEBIAN):
        return []
    with lzma.open(DEBIAN, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# ---- generated reasoning / math / extraction --------------------------------------------------------
def reasoning(rng: random.Random) -> str:
    kind = rng.randrange(8)
    a, b, c, d = rng.sample(NAMES, 4)
    if kind == 0:
        rel = rng.choice([("taller", "shortest"), ("older", "youngest"), ("faster", "slowest")])
        return (f"{a} is {rel[0]} than {b}, and {c} is {rel[0]} than {a}. {d} is {rel[0]} than "
                f"{c}. Who is the {rel[1]}? Explain your reasoning.")
    if kind == 1:
        x, y, z = rng.sample(["cats", "pilots", "musicians", "gardeners", "students", "runners",
                              "painters", "doctors", "chefs", "teachers", "swimmers"], 3)
        q = rng.choice(["all", "some"])
        return (f"All {x} are {y}, and {q} {y} are {z}. Does it follow that some {x} are {z}? "
                "Explain.")
    if kind == 2:
        s, step = rng.randint(1, 20), rng.randint(2, 9)
        seq = rng.choice([[s + i * step for i in range(5)], [s * (2 ** i) for i in range(5)],
                          [(s + i) ** 2 for i in range(5)], [s + i * i for i in range(5)]])
        return f"What is the next number in the sequence {', '.join(map(str, seq))}? Why?"
    if kind == 3:
        h, m = rng.randint(5, 21), rng.choice([0, 10, 15, 20, 35, 45, 50])
        dh, dm = rng.randint(1, 6), rng.choice([5, 25, 40, 55])
        return (f"A bus leaves {rng.choice(CITIES)} at {h}:{m:02d} and the journey takes {dh} hours "
                f"and {dm} minutes. When does it arrive? Show the steps.")
    if kind == 4:
        days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
        return (f"If today is {rng.choice(days)}, what day of the week will it be in "
                f"{rng.randint(10, 400)} days? Explain how you worked it out.")
    if kind == 5:
        n1, n2 = rng.randint(8, 30), rng.randint(8, 30)
        both = rng.randint(1, min(n1, n2) - 1)
        x, y = rng.sample(["tennis", "swimming", "painting", "chess", "cooking", "hiking"], 2)
        return (f"In a club, {n1} members like {x}, {n2} like {y}, and {both} like both. Every "
                f"member likes at least one of them. How many members are there?")
    if kind == 6:
        w, t = rng.randint(2, 9), rng.randint(2, 9)
        return (f"{w} workers build a wall in {t} days. How long would {w * 2} workers take, "
                "assuming they work at the same rate? What assumption matters here?")
    return (f"{a} says: '{b} always tells the truth.' {b} says: '{a} is lying.' Can both "
            "statements be true? Explain.")


def math_problem(rng: random.Random) -> str:
    kind = rng.randrange(12)
    if kind == 0:
        a, x, b = rng.randint(2, 12), rng.randint(-10, 15), rng.randint(-20, 20)
        return f"Solve for x: {a}x {'+' if b >= 0 else '-'} {abs(b)} = {a * x + b}. Show each step."
    if kind == 1:
        x, y = rng.randint(-5, 12), rng.randint(-5, 12)
        a, b = rng.randint(1, 5), rng.randint(1, 5)
        return (f"Solve the system: {a}x + y = {a * x + y} and x - {b}y = {x - b * y}. "
                "Explain your method.")
    if kind == 2:
        r1, r2 = rng.randint(-9, 9), rng.randint(-9, 9)
        return (f"Find the roots of x^2 {'-' if r1 + r2 >= 0 else '+'} {abs(r1 + r2)}x "
                f"{'+' if r1 * r2 >= 0 else '-'} {abs(r1 * r2)} = 0.")
    if kind == 3:
        p, v = rng.choice([5, 10, 12, 15, 20, 30, 35, 40]), rng.randint(20, 500)
        return rng.choice([f"What is {p}% of {v}?",
                           f"A jacket costs {v} euros and is reduced by {p}%. What is the new "
                           "price?",
                           f"A town of {v * 100} people grows by {p}% a year. How many people "
                           "live there after two years?"])
    if kind == 4:
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        return rng.choice([f"What are the area and perimeter of a {a} m by {b} m rectangle?",
                           f"A right triangle has legs of {a} cm and {b} cm. How long is the "
                           "hypotenuse?",
                           f"What is the volume of a cylinder with radius {a} cm and height "
                           f"{b} cm?"])
    if kind == 5:
        n = rng.randint(2, 4)
        return rng.choice([f"If you flip a fair coin {n + 1} times, what is the probability of "
                           "getting at least one head?",
                           f"What is the probability of drawing {n} aces in a row from a "
                           "shuffled deck without replacement?",
                           f"Two dice are rolled. What is the probability that the total is "
                           f"{rng.randint(3, 11)}?"])
    if kind == 6:
        a, b, c, d = (rng.randint(1, 12) for _ in range(4))
        op = rng.choice(["+", "-", "*", "/"])
        return f"Compute {a}/{b + 1} {op} {c}/{d + 1} and give the result as a reduced fraction."
    if kind == 7:
        a, b = rng.randint(12, 400), rng.randint(12, 400)
        return rng.choice([f"Find the least common multiple of {a} and {b}.",
                           f"Find the greatest common divisor of {a} and {b} using Euclid's "
                           "algorithm."])
    if kind == 8:
        cs = [rng.randint(-9, 9) for _ in range(4)]
        poly = " + ".join(f"{c}x^{3 - i}" for i, c in enumerate(cs)).replace("x^0", "")
        return rng.choice([f"Differentiate f(x) = {poly}.",
                           f"Integrate {poly} with respect to x."])
    if kind == 9:
        xs = [rng.randint(1, 50) for _ in range(rng.randint(5, 9))]
        return f"Find the mean, median and range of {', '.join(map(str, xs))}."
    if kind == 10:
        v, u = rng.randint(2, 300), rng.choice([("kilometres", "miles"), ("kilograms", "pounds"),
                                                 ("litres", "gallons"), ("metres", "feet")])
        return f"Convert {v} {u[0]} to {u[1]} and explain the conversion factor."
    n = rng.randint(3, 9)
    return rng.choice([f"Prove that the sum of the first {n} odd numbers is {n * n}.",
                       f"Show that n^2 + n is even for every whole number n, and check it for "
                       f"n = {n}."])


def extraction(rng: random.Random) -> str:
    kind = rng.randrange(7)
    a, b, c = rng.sample(NAMES, 3)
    city = rng.choice(CITIES)
    if kind == 0:
        items = rng.sample(["desk lamp", "USB cable", "notebook", "coffee mug", "backpack",
                            "keyboard", "water bottle", "headphones", "plant pot"], 3)
        lines = "; ".join(f"{rng.randint(1, 5)} x {it} at {rng.randint(3, 90)}.{rng.randint(0, 99):02d}"
                          for it in items)
        text = f"Order {rng.randint(1000, 9999)} for {a} (delivery to {city}): {lines}."
        ask = rng.choice(["List each item with its quantity and unit price as JSON.",
                          "What is the total cost of this order? Show the calculation.",
                          "Extract the customer name, the city and the items."])
    elif kind == 1:
        text = (f"Meeting notes: {a} will prepare the budget by {rng.choice(['Monday', 'Friday'])}. "
                f"{b} will contact the supplier in {city}. {c} asked to move the next meeting to "
                f"{rng.randint(1, 28)} {rng.choice(['March', 'June', 'October'])}.")
        ask = rng.choice(["List the action items with the person responsible for each.",
                          "Who is responsible for what? Answer as a table.",
                          "Extract every date and deadline mentioned."])
    elif kind == 2:
        times = sorted(f"{rng.randint(6, 22)}:{rng.choice(['00', '15', '30', '45'])}"
                       for _ in range(5))
        text = f"Ferries from {city} leave at {', '.join(times)}."
        ask = rng.choice([f"Which ferry should I take to arrive before {rng.randint(12, 23)}:00 "
                          "if the crossing takes 50 minutes?",
                          "How many departures are there in the afternoon?"])
    elif kind == 3:
        text = " ".join(f"{n}: {n.lower()}@{rng.choice(['mail', 'post', 'inbox'])}.example, "
                        f"phone 555-01{rng.randint(10, 99)}." for n in (a, b, c))
        ask = rng.choice(["Put these contacts into a CSV table with name, email and phone.",
                          "Extract every email address."])
    elif kind == 4:
        good, bad = rng.sample(["the battery life", "the screen", "the price", "the delivery",
                                "the sound", "the design", "the customer service"], 2)
        text = (f"Review by {a}: I liked {good}, but {bad} was disappointing. I would "
                f"{rng.choice(['maybe', 'not', 'probably'])} buy it again.")
        ask = rng.choice(["What did the reviewer like and dislike? Answer as JSON.",
                          "Is this review positive, negative or mixed? Quote the evidence."])
    elif kind == 5:
        ing = rng.sample(["flour", "butter", "two eggs", "sugar", "milk", "a pinch of salt",
                          "lemon zest", "oats", "honey", "cinnamon", "yoghurt"], 5)
        text = (f"Mix {ing[0]} and {ing[1]}, then beat in {ing[2]}. Add {ing[3]} and {ing[4]}, "
                f"and bake for {rng.randint(15, 45)} minutes at {rng.choice([160, 180, 200])} C.")
        ask = rng.choice(["List the ingredients and the oven settings.",
                          "Turn this into numbered steps."])
    else:
        text = (f"The {rng.choice(['spring', 'summer', 'winter'])} fair takes place in {city} on "
                f"{rng.randint(1, 28)} {rng.choice(['April', 'July', 'December'])}, from "
                f"{rng.randint(9, 11)} am to {rng.randint(4, 8)} pm. Tickets cost "
                f"{rng.randint(3, 20)} euros; children under {rng.randint(6, 14)} enter free. "
                f"Contact: {a}.")
        ask = rng.choice(["Extract the event's date, hours, place and prices as JSON.",
                          "Answer: how much would a family of two adults and a five-year-old "
                          "pay?"])
    return rng.choice([f"{ask}\n\n{text}", f"{text}\n\n{ask}"])


# ---- the pool -------------------------------------------------------------------------------------
def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def _grams(norm: str) -> set:
    w = norm.split()
    return {" ".join(w[i:i + 3]) for i in range(max(1, len(w) - 2))}


class EvalFilter:
    """Rejects a text that overlaps an evaluation prompt (the rules of check_overlap.py)."""

    def __init__(self, path: str = EVAL_SET):
        self.norms, self.index = [], {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    j = json.loads(line)
                    for t in j.get("turns", [j.get("prompt", "")]):
                        self.norms.append(_norm(t))
        for k, n in enumerate(self.norms):
            for g in _grams(n):
                self.index.setdefault(g, []).append(k)

    def overlaps(self, text: str) -> bool:
        n = _norm(text)
        grams = _grams(n)
        counts = {}
        for g in grams:
            for k in self.index.get(g, ()):
                counts[k] = counts.get(k, 0) + 1
        for k, shared in counts.items():
            e = self.norms[k]
            if shared / len(grams | _grams(e)) >= 0.5 or e == n:
                return True
            if (len(e.split()) >= 6 and e in n) or (len(n.split()) >= 6 and n in e):
                return True
        return False


def _eval_norms(path: str = EVAL_SET) -> list:
    return EvalFilter(path).norms


def _held_out_norms() -> list:
    """The normalised prompts no training topic may name: the evaluation set's, and those of the
    training pipeline's own held-out splits (data/test.jsonl, data/calib.jsonl)."""
    norms = _eval_norms()
    for name in ("test.jsonl", "calib.jsonl"):
        path = os.path.join(HERE, "data", name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    j = json.loads(line)
                    turns = [m["content"] for m in j.get("messages", []) if m.get("role") == "user"]
                    norms += [_norm(t) for t in turns or [j.get("prompt", "")]]
    return norms


def topic_core(topic: str) -> str:
    """A topic's normalised text without a leading "the"."""
    t = _norm(topic)
    return t[4:] if t.startswith("the ") else t


def usable_topics(topics: list, norms: list) -> list:
    """The topics (in order, without duplicates) whose core occurs in none of the normalised
    prompts `norms`: "the water cycle" is dropped where a prompt asks "Explain the water cycle"."""
    seen, out = set(), []
    for t in topics:
        c = topic_core(t)
        if c in seen or any(f" {c} " in f" {e} " for e in norms):
            continue
        seen.add(c)
        out.append(t)
    return out


# The topic lists with chat_topics.py's additions, less the topics a held-out prompt names
# (self_instruct.py seeds its asks from these too).
sys.path.insert(0, HERE)
import chat_topics  # noqa: E402

_HELD_OUT = _held_out_norms()
STEM_TOPICS = usable_topics(STEM_TOPICS + chat_topics.STEM_TOPICS_MORE, _HELD_OUT)
HUMANITIES_TOPICS = usable_topics(HUMANITIES_TOPICS + chat_topics.HUMANITIES_TOPICS_MORE, _HELD_OUT)
STEM_PHRASES = STEM_PHRASES + chat_topics.STEM_PHRASES_MORE
HUMANITIES_PHRASES = HUMANITIES_PHRASES + chat_topics.HUMANITIES_PHRASES_MORE


def broad_pool(rng: random.Random):
    """(candidates, info): candidates yields (prompt, source) forever (generated kinds) with the
    Debian descriptions spread through it until they run out; none overlaps the evaluation set."""
    deb = debian_rows()
    deb_prompts = [(t.format(p=r["package"], s=r["short"], d=r["description"]),
                    f"debian:{r['section']}") for r in deb for t in DEBIAN_TEMPLATES]
    rng.shuffle(deb_prompts)
    info = {"debian_descriptions": len(deb), "debian_prompts_available": len(deb_prompts),
            "rejected_eval_overlap": 0}
    flt = EvalFilter()

    def writing():
        return (f"Write {rng.choice(WRITING_FORMS)} about {rng.choice(WRITING_SUBJECTS)}"
                f"{rng.choice(WRITING_CONSTRAINTS)}.")

    def roleplay():
        return rng.choice([f"You are {rng.choice(PERSONAS)}. {rng.choice(SITUATIONS)}",
                           f"Pretend to be {rng.choice(PERSONAS)}. {rng.choice(SITUATIONS)}"])

    gens = {
        "broad:writing": writing, "broad:roleplay": roleplay,
        "broad:reasoning": lambda: reasoning(rng), "broad:math": lambda: math_problem(rng),
        "broad:extraction": lambda: extraction(rng),
        "broad:stem": lambda: rng.choice(STEM_PHRASES).format(t=rng.choice(STEM_TOPICS)),
        "broad:humanities": lambda: rng.choice(HUMANITIES_PHRASES).format(
            t=rng.choice(HUMANITIES_TOPICS)),
    }
    kinds = sorted(gens)

    def candidates():
        deb_iter = iter(deb_prompts)
        while True:
            # One Debian prompt per two generated ones while they last.
            for source in (rng.choice(kinds), rng.choice(kinds), "debian"):
                if source == "debian":
                    got = next(deb_iter, None)
                    if got is None:
                        continue
                    prompt, source = got
                else:
                    prompt = gens[source]()
                if flt.overlaps(prompt):
                    info["rejected_eval_overlap"] += 1
                    continue
                yield prompt, source

    return candidates(), info
