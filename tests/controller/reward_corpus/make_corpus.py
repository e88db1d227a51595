#!/usr/bin/env python3
"""Builds cases.jsonl: rule-reward inputs with the scores verl's own scorers give them.

Each line is {"data_source", "response", "ground_truth", "score", "extra"}; "score" and "extra"
(the other keys of a dict result, e.g. math_dapo's acc and pred) come from calling verl's
verl.utils.reward_score.default_compute_score. verl's code is not part of verlpp: point --verl at
the reward_score folder of a verl checkout at the commit docs/training.md names, e.g.

  git -C verl archive b178a3cd56f58b2d502255daba591e92833930a7 verl/utils/reward_score | tar -x -C /tmp/v
  python3 make_corpus.py --verl /tmp/v/verl/utils/reward_score --out cases.jsonl

The inputs are generated here (seeded, so the file is reproducible): correct and wrong answers in
every formatting variant the rules treat differently, per scorer family.
"""

import argparse
import contextlib
import importlib.util
import io
import json
import random
import sys
import types

VERL_COMMIT = "b178a3cd56f58b2d502255daba591e92833930a7"


def load_verl(folder):
    """verl.utils.reward_score as a package, without importing the rest of verl."""
    for name in ("verl", "verl.utils"):
        module = types.ModuleType(name)
        module.__path__ = []
        sys.modules[name] = module
    import_utils = types.ModuleType("verl.utils.import_utils")
    import_utils.deprecated = lambda *_a, **_k: (lambda f: f)
    sys.modules["verl.utils.import_utils"] = import_utils
    spec = importlib.util.spec_from_file_location(
        "verl.utils.reward_score", f"{folder}/__init__.py", submodule_search_locations=[folder]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules["verl.utils.reward_score"] = package
    spec.loader.exec_module(package)
    return package.default_compute_score


LONG_PROSE = "Let us reason step by step about the problem. " * 12  # ~550 characters
UNICODE_PROSE = "Рассуждаем: π≈3.14, ∑ and ² — 数学 " * 12


def gsm8k_cases(rng):
    truths = ["72", "1234", "-3", "0", "3.5", "18", "1000000", "007", "5", "1,000", "-0", "42"]
    cases = []

    def number_forms(t):
        forms = {t, t + ".0", t + ".", "0" + t, "+" + t, t.replace("-", ""), "-" + t, t + ",", "," + t, "$" + t}
        if t.lstrip("-").isdigit() and len(t.lstrip("-")) > 3:
            digits = t.lstrip("-")
            grouped = f"{int(digits):,}"
            forms |= {("-" if t.startswith("-") else "") + grouped, grouped.replace(",", ".")}
        forms |= {t + "0", str(int(float(t.replace(",", ""))) + 1) if t.replace(",", "").replace(".", "").lstrip("-").isdigit() else t + "1"}
        forms |= {"７２", "٧٢", "7 2", "72%", "3.5.1", "..", "."}
        return sorted(forms)

    templates = [
        "So the total is\n#### {x}",
        "#### {x}",
        "####{x}",
        "#### {x} dollars",
        "#### {x}.",
        "The answer is {x}",
        "#### {x}\n#### 99",
        "#### 99\n#### {x}",
        "The answer: ${x}$ so #### {x}",
        "#### ${x}",
        "##### {x}",
        "#### -{x}",
        "Step 1: 3 + 4 = 7\nStep 2: 7 * 2 = 14\n#### {x}",
        LONG_PROSE + "#### {x}",
        "#### {x}" + LONG_PROSE,
        UNICODE_PROSE + "\n#### {x}",
        "#### {x}" + "π" * 295,
        "#### {x}" + "π" * 300,
        "\u00a0#### {x}",
        "####\u00a0{x}",
    ]
    exact = []
    for truth in truths:
        for template in templates:
            exact.append(("openai/gsm8k", template.replace("{x}", truth), truth))
        for x in number_forms(truth):
            for template in templates:
                cases.append(("openai/gsm8k", template.replace("{x}", x), truth))
    rng.shuffle(cases)
    return exact + cases[:500]


# (boxed content, ground truth) pairs the Hendrycks rule normalises in interesting ways.
MATH_PAIRS = [
    ("\\pi / 2", "\\pi/2"), ("\\fracπ2", "\\frac{π}{2}"), ("x²=4", "4"), ("50\\\\\\%", "50"),
    ("\\frac12", "\\frac{1}{2}"), ("\\dfrac{1}{2}", "\\frac12"), ("0.5", "\\frac{1}{2}"), ("1/2", "\\frac{1}{2}"),
    ("3/4", "\\frac34"), ("x/2", "\\frac{x}{2}"), ("x/2", "x/2"), ("-1/2", "\\frac{-1}{2}"), ("01/2", "\\frac{1}{2}"),
    ("123456789012345678901234567890/3", "\\frac{123456789012345678901234567890}{3}"),
    ("99999999999999999999/7", "99999999999999999999/7"), ("1/2/3", "1/2/3"), ("+1/2", "\\frac{1}{2}"),
    ("-0/1", "\\frac{0}{1}"), ("0/1", "\\frac{0}{1}"), ("1 / 2", "\\frac{1}{2}"), ("٣/4", "\\frac{3}{4}"),
    ("\\sqrt3", "\\sqrt{3}"), ("2\\sqrt2", "2\\sqrt{2}"), ("\\sqrt", "\\sqrt"), ("\\sqrtπ", "\\sqrt{π}"),
    ("\\sqrt{3}/2", "\\frac{\\sqrt{3}}{2}"), ("5\\text{ cm}", "5"), ("5\\text{ cm}\\text{ m}", "5"),
    ("5\\text{ cm}\\text{ m}", "5\\text{ cm}\\text{ m}"), ("\\left(1,2\\right)", "(1,2)"), ("90^\\circ", "90"),
    ("90^{\\circ}", "90"), ("\\$5", "5"), (".5", "0.5"), ("x = 3", "3"), ("xy = 3", "3"), ("xyz = 3", "3"),
    ("π=3", "3"), ("a=b=c", "c"), ("10\\%", "10"), ("10\\\\%", "10"), ("1,000", "1000"), ("1{,}000", "1000"),
    ("\\frac{1}{2}", "0.5"), ("\\tfrac{3}{4}", "\\frac34"), ("\\frac1{72}", "\\frac{1}{72}"),
    ("\\frac{72}1", "\\frac{72}{1}"), ("\\frac", "\\frac"), ("\\frac1", "\\frac1"), ("\\frac1", "\\frac{1}"),
    ("π", "\\pi"), ("2π", "2\\pi"), ("√3", "\\sqrt3"), ("x²", "x^2"), ("\\text{(A)}", "A"), ("\\textbf{A}", "A"),
    ("(A)", "A"), ("\n5\n", "5"), ("5\\!000", "5000"), ("\\{1,2\\}", "\\{1, 2\\}"), ("[0,1)", "[0, 1)"),
    ("-\\infty", "-\\infty"), ("x \\in [0, 1]", "[0,1]"), ("1.", "1"), (" .5", "0.5"), ("{.5}", "{0.5}"),
    ("\\frac{a}{b}", "\\frac ab"), ("\\frac a b", "\\frac{a}{b}"), ("\\mbox{5}", "5"), ("5\\ \\text{m}", "5"),
    ("1\\times10^3", "1000"), ("2^{10}", "1024"), ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}"),
    ("\\frac{1}{\\sqrt2}", "\\frac{\\sqrt{2}}{2}"), ("\\$\\$5", "5"), ("", ""), ("", "0"), ("7", "7 "),
    ("0.50", "\\frac{1}{2}"), ("\\left[ 1, 2 \\right]", "[1,2]"), ("k = \\frac12", "\\frac12"),
    ("\\text{Monday}", "Monday"), ("\\text{ Monday}", "Monday"), ("\\dfrac{π}{2}", "\\frac{\\pi}{2}"),
    ("x=1 \\text{ or } x=2", "1, 2"), ("\\frac{ 1 }{ 2 }", "\\frac{1}{2}"), ("٣", "3"), ("3", "٣"),
]
BOX_WRAPPERS = [
    "\\boxed{X}", "The answer is $\\boxed{X}$.", "\\boxed X$", "\\boxed X", "so \\boxed X and more",
    "\\fbox{X}", "\\boxed{0} first, then \\boxed{X}", "\\boxed{X} first, then \\boxed{0}", "\\boxed{X",
    "\\boxed {X}", "\\boxed{{X}}", "\\boxed{X}}", LONG_PROSE + "\\boxed{X}", UNICODE_PROSE + "\\boxed{X}",
    "\\boxed{}X", "$\\boxed X$ and \\boxed{1}", "\\boxed\n{X}", "No box here: X",
]


def math_cases(rng):
    sources = ["lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"]
    cases = []
    for content, truth in MATH_PAIRS:
        for wrapper in BOX_WRAPPERS[:8]:
            cases.append((rng.choice(sources), wrapper.replace("X", content), truth))
    contents = [c for c, _ in MATH_PAIRS]
    truths = [t for _, t in MATH_PAIRS]
    for _ in range(500):
        wrapper = rng.choice(BOX_WRAPPERS)
        cases.append((rng.choice(sources), wrapper.replace("X", rng.choice(contents)), rng.choice(truths)))
    return cases


DAPO_PAIRS = [
    ("5", "5"), ("1,000", "1000"), ("1,000,000", "1000000"), ("\\frac{1}{2}", "\\frac12"), ("\\frac12", "\\frac{1}{2}"),
    ("\\fracπ2", "\\frac{π}{2}"), ("2\\sqrt2", "2\\sqrt{2}"), ("\\pi/2", "\\pi / 2"), ("-3", "-3"), ("x^2", "x^2"),
    ("(1,2)", "(1, 2)"), ("\\text{A}", "A"), ("\\textbf{B}", "B"), ("\\overline{12}", "12"), ("10\\%", "10"),
    ("$5$", "5"), ("3 units", "3"), ("18 degrees", "18"), ("\\$4.50", "4.50"), ("a=3", "3"), ("x = 5", "5"),
    ("\\boxed{7}", "7"), ("7 \\text{ cm}", "7"), ("50^\\circ", "50"), ("50^{\\circ}", "50"), ("1{,}234", "1234"),
    ("²", "2"), ("1,²3", "1²3"), ("٣,٤", "٣٤"), ("an apple", "apple"), ("a dog", "dog"), ("5 mph", "5"),
    ("12 inches", "12"), ("\\$ 5", "5"), ("5.", "5"), ("5.$", "5$"), ("\\text{m}5", "5"), ("3\\;4", "34"),
    ("3,\\!000", "3000"), ("\\ldots", ""), ("sue", ""), ("childrentickets 4", "4"), ("\\mathrm{th} 3", "3"),
    ("x \\text{and} y", "x,y"), ("$x$ and $y$", "x"), ("$1$ or $2$", "$1$"), ("\\frac{1}{2}$", "\\frac{1}{2}"),
    ("\\sqrt3", "\\sqrt{3}"), ("\\sqrt{3}", "sqrt3"), ("frac12", "\\frac{1}{2}"), ("\\boxed{\\frac{1}{2}}", "\\frac12"),
    ("\\boxed{1}+\\boxed{2}", "1}+\\boxed{2"), ("\\text{yes}", "yes"), ("\\text{\\textbf{C}}", "C"), ("\"Q\"", "Q"),
    ("  9  ", "9"), ("9\u3000", "9"), ("\u00a09", "9"), ("[INVALID]", "[INVALID]"), ("", ""), ("0", "0"),
    ("\\infty", "\\infty"), ("\\{1,2\\}", "\\{1,2\\}"), ("1e3", "1000"), ("2,3", "23"), ("2, 3", "2,3"),
    ("ⅻ", "12"), ("①", "1"), ("12 square feet", "12"), ("π", "\\pi"), ("½", "\\frac{1}{2}"),
]
ANSWER_TEMPLATES = [
    "Answer: X", "answer:X", "ANSWER :  X", "Answer:\nX", "Answer: X\nAnswer: 99", "Answer: 99\nAnswer: X",
    "The final Answer: X", "Answer: X.", "Answer: X\n\nThat is all.", "Anſwer: X", "Answer:\u00a0X",
    "Answer: X\u3000", "Answer\t:\tX", "Answer : \nX", "Answer: \n", "Answer:", "No answer line, just X",
    "FinalAnswer:X", "Answer: Answer: X", LONG_PROSE + "\nAnswer: X", "Answer: X\n" + LONG_PROSE,
    "Answer: X" + "π" * 280, "Answer: X" + "π" * 300, UNICODE_PROSE + "Answer: X", "answer: X\r\n",
    "Answer:: X", "Answer: $X$", "Answer: \\boxed{X}",
]


def dapo_cases(rng):
    sources = ["math_dapo", "math", "math_dapo_reasoning", "aime2024", "aime_2025", "aime"]
    cases = []
    for pred, truth in DAPO_PAIRS:
        for template in rng.sample(ANSWER_TEMPLATES, 6) + ["Answer: X"]:
            cases.append((rng.choice(sources), template.replace("X", pred), truth))
    preds = [p for p, _ in DAPO_PAIRS]
    truths = [t for _, t in DAPO_PAIRS] + ["5\n6", "$1$\n$2$", "\\text{a\n}b", "\\boxed{1\n}"]
    for _ in range(400):
        template = rng.choice(ANSWER_TEMPLATES)
        cases.append((rng.choice(sources), template.replace("X", rng.choice(preds)), rng.choice(truths)))
    return cases


QA_TARGETS = [
    ["Paris"], ["The Beatles", "Beatles"], ["Barack Obama", "Obama"], ["1945"], ["São Paulo"], ["İstanbul"],
    ["ΟΔΥΣΣΕΥΣ"], ["Straße"], ["a"], ["the"], ["an apple"], ["U.S.A.", "United States"], ["don't stop"],
    ["日本"], ["x_y"], ["Hello World"], ["the the"], ["A Tale of Two Cities"], ["ǅemal"], ["ＡＢＣ"], "Paris",
    ["naïve café"], ["K-9"], ["Kelvin"], ["r&b"], ["3.14"], ["théâtre"], ["über"],
]


def qa_variants(answer):
    words = answer.split()
    forms = [
        answer, answer.upper(), answer.lower(), answer.title(), "the " + answer, "The " + answer, answer + ".",
        "  " + answer + "  ", "\n" + answer + "\n", "\u00a0".join(words), "\u3000" + answer, answer + "!!",
        "a " + answer, "an " + answer, "«" + answer + "»", '"' + answer + '"', answer.replace(" ", "  "),
        answer + " (approx)", answer[:-1] if len(answer) > 1 else answer + "x", "not " + answer,
    ]
    return forms


QA_TEMPLATES = [
    "<answer>X</answer>", "I think <answer> X </answer>", "<answer>wrong</answer> then <answer>X</answer>",
    "<answer>X</answer> then <answer>wrong</answer>", "<answer>\nX\n</answer>", "<answer>X", "X</answer>",
    "<answer><answer>X</answer>", "Answer: X", "<Answer>X</Answer>", "<answer>X</answer>" + "</answer>" * 10,
    "<answer>X</answer>" + "</answer>" * 9, "<answer>" * 11 + "X</answer>", LONG_PROSE + "<answer>X</answer>",
    "<think>hmm</think><answer>X</answer>", "<answer></answer>", "<answer>X</answer >",
]
QA_SOURCES = [
    "searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa", "searchR1_2wikimultihopqa",
    "searchR1_musique", "searchR1_bamboogle",
]


def qa_cases(rng):
    cases = []
    for target in QA_TARGETS:
        first = target if isinstance(target, str) else target[0]
        for form in qa_variants(first):
            template = rng.choice(QA_TEMPLATES[:4] + QA_TEMPLATES[4:])
            cases.append((rng.choice(QA_SOURCES), template.replace("X", form), {"target": target}))
            cases.append((rng.choice(QA_SOURCES), "<answer>" + form + "</answer>", {"target": target}))
    for _ in range(200):
        target = rng.choice(QA_TARGETS)
        other = rng.choice(QA_TARGETS)
        form = rng.choice(qa_variants(other if isinstance(other, str) else rng.choice(other)))
        cases.append((rng.choice(QA_SOURCES), rng.choice(QA_TEMPLATES).replace("X", form), {"target": target}))
    return cases


# Fuzzing: random strings of the tokens the rules react to, and a ground truth made from the same
# string with insertions the normalisations may or may not undo.
TOKENS = [
    "\\boxed{", "\\boxed ", "\\fbox{", "{", "}", "$", "\\frac", "\\dfrac", "\\tfrac", "frac", "\\sqrt", "sqrt",
    "=", "/", " ", "\n", "1", "2", "7", "0", "-", ".", ",", "π", "²", "\\text{", "\\text{ ", "\\textbf{",
    "\\overline{", "\\%", "%", "\\\\", "\\", "\\left", "\\right", "^\\circ", "^{\\circ}", "\\!", "\\$",
    "x", "٣", "mbox", "an ", "a ", "units", "\\text{and}", "\\ldots", "{,}", "\"", "\u00a0", "\u3000", "\t",
]
IGNORABLE = [" ", "\\left", "\\right", "\\!", "\n", "$", "\\$", "{,}", "\u00a0", "\\text{}", ",", "\\%"]


def fuzz_string(rng, low, high):
    return "".join(rng.choice(TOKENS) for _ in range(rng.randint(low, high)))


def mutate(rng, text, tokens):
    pieces = list(text)
    for _ in range(rng.randint(0, 3)):
        pieces.insert(rng.randint(0, len(pieces)), rng.choice(tokens))
    return "".join(pieces)


def fuzz_cases(rng):
    cases = []
    for _ in range(600):
        content = fuzz_string(rng, 1, 10)
        truth = mutate(rng, content, IGNORABLE) if rng.random() < 0.7 else fuzz_string(rng, 1, 8)
        cases.append(("math", rng.choice(["lighteval/MATH", "HuggingFaceH4/MATH-500"]),
                      rng.choice(BOX_WRAPPERS).replace("X", content) if rng.random() < 0.5 else fuzz_string(rng, 2, 25),
                      truth))
    for _ in range(600):
        content = fuzz_string(rng, 1, 10)
        truth = mutate(rng, content, IGNORABLE) if rng.random() < 0.7 else fuzz_string(rng, 1, 8)
        prefix = rng.choice(["Answer: ", "answer :", "ANSWER:\n", "", "Answer:", "Anſwer: "])
        cases.append(("math_dapo", rng.choice(["math_dapo", "aime24", "math"]),
                      fuzz_string(rng, 0, 6) + prefix + content + fuzz_string(rng, 0, 4), truth))
    qa_alphabet = ["the", "a", "an", "The", "A", " ", "  ", "\u00a0", "\n", ".", ",", "!", "'", "-", "_", "é", "İ",
                   "Σ", "ς", "σ", "ß", "ǅ", "K", "x", "y", "1", "²", "日", "«", "»", "\u2028", "\u200b", "ﬁ", "Ω"]
    for _ in range(500):
        answer = "".join(rng.choice(qa_alphabet) for _ in range(rng.randint(1, 10)))
        variant = mutate(rng, answer, [" ", ".", "the ", "\u00a0", "!", "A "])
        variant = rng.choice([variant, variant.upper(), variant.lower(), variant.title()])
        target = [variant] if rng.random() < 0.8 else [rng.choice(qa_alphabet), variant]
        cases.append(("qa_em", rng.choice(QA_SOURCES), rng.choice(QA_TEMPLATES).replace("X", answer), {"target": target}))
    for _ in range(300):
        response = "".join(rng.choice(["#### ", "####", "-", "1", "2", ",", ".", "$", " ", "\n", "x", "π", "٣"])
                           for _ in range(rng.randint(1, 14)))
        truth = rng.choice(["12", "1", "-1", "1.2", "21", "2", ""])
        cases.append(("gsm8k", "openai/gsm8k", response, truth))
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verl", required=True, help="verl's verl/utils/reward_score folder")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    score = load_verl(args.verl)
    rng = random.Random(28)
    families = {"gsm8k": gsm8k_cases, "math": math_cases, "math_dapo": dapo_cases, "qa_em": qa_cases}
    counts = {}
    fuzz = fuzz_cases(rng)
    with open(args.out, "w", encoding="utf-8") as out:
        for family, make in families.items():
            seen = set()
            rows = 0
            generated = make(rng) + [case[1:] for case in fuzz if case[0] == family]
            for source, response, truth in generated:
                key = (source, response, json.dumps(truth, ensure_ascii=False))
                if key in seen:
                    continue
                seen.add(key)
                with contextlib.redirect_stdout(io.StringIO()):  # verl's scorers print now and then
                    result = score(source, response, truth)
                if isinstance(result, dict):
                    value = float(result["score"])
                    extra = {k: v for k, v in result.items() if k != "score"}
                else:
                    value, extra = float(result), {}
                line = {"family": family, "data_source": source, "response": response, "ground_truth": truth,
                        "score": value, "extra": extra}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                rows += 1
            counts[family] = rows
    print(json.dumps({"verl_commit": VERL_COMMIT, "cases": counts}))


if __name__ == "__main__":
    main()
