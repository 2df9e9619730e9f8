#!/usr/bin/env python3
"""Every claim lumen.h makes about statuses, bounds and guarantees is accounted for.

A claim is a sentence of a comment in capi/include/lumen/lumen.h that names a status
(LUMEN_ERROR_...), states a bound ("at most") or a guarantee ("never", "no-op", "always",
"forever", "only ever", "unchanged", "changes nothing", "only read", "bit for bit", ...: see
CLAIM_WORDS). Each claim
has a subject: the declaration its comment documents (a function, type, field or enumerator),
or the title of the part of the header's opening comment it stands in ("Conventions", ...).

The tests in tests/header/*_test.cc account for the claims, one section of the header per
file, with three macros (tests/header/header_claims.h):

  LUMEN_CLAIM(subject, sentence)                   inside the TEST_CASE that proves it
  LUMEN_CLAIM_PROVEN_ELSEWHERE(subject, sentence, "tests/<path>", "<TEST_CASE name>")
                                                   proven by a test outside tests/header
                                                   (a GPU suite, a long-running test)
  LUMEN_CLAIM_UNPROVEN(subject, sentence, reason)  no test can prove it here, and why

A claim may be accounted for by several entries, one per part: a CPU test here, a GPU test
elsewhere, and what no test reaches, with its reason.

This checker fails when a claim of the header is not accounted for (a new or reworded
sentence), when a macro quotes a sentence the header does not have (any sentence may be
quoted, claim or not) (the header changed, or
the quote is wrong), when a PROVEN_ELSEWHERE test does
not exist, or when a binding's documentation that repeats a claim (BINDING_REPEATS below) no
longer finds it in the header or in the binding. Sentences compare with runs of white space
as one space.

Usage: check_header_claims.py REPOSITORY_ROOT [--list | --self-test]
  --list       print every claim with its subject
  --self-test  check that edits of the header (a bound, a status, a new claim) are caught
"""

import pathlib
import re
import sys

HEADER = "capi/include/lumen/lumen.h"
TESTS = "tests/header"
CLAIM_WORDS = re.compile(r"LUMEN_ERROR_|\bat most\b|\bnever\b|\bno-op\b|\bforever\b|\b[Aa]lways\b|"
                         r"\bonly ever\b|\bunchanged\b|\bchang(?:es|ing) nothing\b|"
                         r"\bno session changes\b|\bexactly as before\b|\bno object was changed\b|"
                         r"\bchanges no session\b|\bwritten only on success\b|\bonly read\b|"
                         r"\bowner only\b|\bgrows nothing\b|\bbit for bit\b")

# Statements of the bindings' own documentation (not generated from lumen.h) that repeat a
# claim of the header: (file, text the file holds, subject, the header's sentence). The
# bindings' generated sources (bindings/swig/generated, lumen-sys's bindings.rs) carry the
# header's comments themselves; bindings/regenerate.sh --check keeps them current.
NO_OBJECT_CHANGED = ("Every fallible call returns lumen_status; on failure "
                     "lumen_last_error_message() holds a message for the calling thread, and no "
                     "object was changed.")
BINDING_REPEATS = [
    ("bindings/csharp/LumenException.cs", "The call changed nothing.", "Conventions",
     NO_OBJECT_CHANGED),
    ("bindings/csharp/README.md", "library's message; the call changed nothing.", "Conventions",
     NO_OBJECT_CHANGED),
    ("bindings/java/README.md", "The session is unchanged after any failed call.",
     "Conventions", NO_OBJECT_CHANGED),
    ("bindings/java/org/lumen/EngineOptions.java",
     "Sets the CPU worker threads including the caller, at most 1024",
     "lumen_engine_options.num_threads",
     "CPU worker threads including the caller, at most 1024; 0 = one per hardware thread"),
    ("bindings/java/org/lumen/Engine.java", "The backend in use (never AUTO).",
     "lumen_engine_backend",
     "Writes the backend actually used (a lumen_backend value, never AUTO) to *out."),
    ("bindings/java/org/lumen/Engine.java",
     "Makes the engine ready for every layer call of at most {@code maxSessions} sessions and "
     "{@code maxTokens} tokens",
     "lumen_engine_reserve",
     "Makes the engine ready, now, for every layer call of at most reservation->max_sessions "
     "sessions and reservation->max_tokens tokens: any layer of the model, step or prefill, "
     "every input and output dtype, buffers in device memory."),
    ("bindings/csharp/Engine.cs", "The backend in use (never AUTO).",
     "lumen_engine_backend",
     "Writes the backend actually used (a lumen_backend value, never AUTO) to *out."),
    ("bindings/rust/lumen/src/engine.rs", "The backend in use (never AUTO).",
     "lumen_engine_backend",
     "Writes the backend actually used (a lumen_backend value, never AUTO) to *out."),
]


def squash(text):
    return re.sub(r"\s+", " ", text).strip()


def doc_text(path):
    """A source file's text without the markers that start comment lines (*, //, ///, #)."""
    lines = [re.sub(r"^\s*(?:/\*+|\*+(?!/)|//+!?|#)\s?", "", line)
             for line in path.read_text().splitlines()]
    return squash(" ".join(lines))


def split_sentences(text):
    """Splits at '. ' (or a list's ' - ') outside parentheses, not after e.g. or i.e."""
    sentences, current, depth, i = [], [], 0, 0
    while i < len(text):
        c = text[i]
        current.append(c)
        if c in "([":
            depth += 1
        elif c in ")]":
            depth = max(0, depth - 1)
        elif depth == 0 and c == "." and text[i + 1:i + 2] == " " and text[i - 1:i] != ".":
            sentence = "".join(current)
            if not sentence.endswith(("e.g.", "i.e.")):
                sentences.append(sentence)
                current = []
        elif depth == 0 and text.startswith(" - ", i):
            sentences.append("".join(current))
            current = []
            i += 2
        i += 1
    sentences.append("".join(current))
    return [squash(s) for s in sentences if squash(s)]


def comment_text(lines):
    body = []
    for line in lines:
        line = re.sub(r"^\s*/\*+", "", line)
        line = re.sub(r"\*+/\s*$", "", line)
        line = re.sub(r"^\s*\*(?!/) ?", "", line)
        body.append(line)
    # A list item's dash, not a number's sign ("-1 (default)").
    return re.sub(r"^(?:-+$|- )", "", squash(" ".join(body)))


def declared_name(code, struct):
    """The name a line of code declares: a function, a type, a field or an enumerator."""
    m = re.search(r"typedef\s+(?:struct|enum)\s+(\w+)", code)
    if m:
        return m.group(1)
    m = re.search(r"(\w+)\s*\(", code)
    if m and "LUMEN_API" in code:
        return m.group(1)
    m = re.search(r"#define\s+(\w+)", code)
    if m:
        return m.group(1)
    m = re.match(r"\s*(LUMEN_\w+)\s*=", code)
    if m:
        return m.group(1)
    m = re.search(r"(\w+)\s*;", code)
    if m and struct:
        return struct + "." + m.group(1)
    return None


RULE = re.compile(r"\s*/\* -+ \*/\s*$")
BOX_LINE = re.compile(r"\s*/\*.*\*/\s*$")
EMPTY_BOX_LINE = re.compile(r"\s*/\*\s*\*/\s*$")


def banner_title(text):
    """A section's name from its banner ("Session stores (since 0.3)": "Session stores")."""
    m = re.fullmatch(r"([A-Z][A-Za-z ]+?)(?: \(since [0-9.]+\))?", text)
    return m.group(1) if m else None


def boxed_section(lines, i):
    """At a banner box's top rule: (the title's line, the prose's lines, the line after
    the bottom rule); None anywhere else. The box is one-line comments between two rules."""
    if not RULE.match(lines[i]):
        return None
    k = i + 1
    while k < len(lines) and BOX_LINE.match(lines[k]) and not RULE.match(lines[k]):
        k += 1
    if k == i + 1 or k >= len(lines) or not RULE.match(lines[k]):
        return None
    inside = [j for j in range(i + 1, k) if not EMPTY_BOX_LINE.match(lines[j])]
    if not inside or not banner_title(comment_text([lines[inside[0]]])):
        return None
    return inside[0], inside[1:], k + 1


def header_sentences(root, header_text=None):
    """[(subject, sentence)] of every sentence of lumen.h's comments (or of header_text, a
    version of it), in order."""
    lines = (header_text or (root / HEADER).read_text()).splitlines()
    comments = []  # (first line, last line, text, subject or None, trailing)
    struct, i = None, 0
    while i < len(lines):
        line = lines[i]
        m = re.search(r"typedef\s+(?:struct|enum)\s+(\w+)\s*\{", line)
        if m:
            struct = m.group(1)
        if re.match(r"\s*\}", line):
            struct = None
        start = line.find("/*")
        if start < 0:
            i += 1
            continue
        box = boxed_section(lines, i)
        if box:
            # A section's banner box: its title line, then any prose under it, whose
            # sentences are the section's (its subject).
            title_line, prose, end = box
            comments.append((title_line, title_line, [lines[title_line]], None, False))
            if prose:
                title = banner_title(comment_text([lines[title_line]]))
                comments.append((prose[0], prose[-1], [lines[k] for k in prose], title, False))
            i = end
            continue
        code = line[:start]
        j = i
        while "*/" not in lines[j][start if j == i else 0:]:
            j += 1
        block = [line[start:]] + lines[i + 1:j + 1]
        subject = declared_name(code, struct) if code.strip() else None
        comments.append((i, j, block, subject, bool(code.strip())))
        i = j + 1

    claims, section, title = [], None, None
    for index, (first, last, block, subject, trailing) in enumerate(comments):
        text = comment_text(block)
        if re.fullmatch(r"-+", text):
            continue
        if first == 0:  # the opening comment: its parts have titles
            part, parts = "Preamble", {}
            for raw in block:
                content = re.sub(r"^\s*/?\*+ ?", "", raw)
                if re.match(r"[A-Z][A-Za-z ]+(\s\(|:|$)", content) and not content.startswith(
                        ("This ", "lumen")):
                    part = re.match(r"[A-Za-z ]+", content).group(0).strip()
                parts.setdefault(part, []).append(raw)
            for part, raws in parts.items():
                for sentence in split_sentences(comment_text(raws)):
                    claims.append((part, sentence))
            continue
        if banner_title(text) and last + 1 < len(lines) and (
                RULE.match(lines[last + 1]) or EMPTY_BOX_LINE.match(lines[last + 1])):
            section = banner_title(text)
            continue
        if subject is None:
            # A comment on lines of its own documents the first declaration after it (a
            # banner's text documents its section).
            k = last + 1
            struct_at = None
            for back in range(first, -1, -1):
                if re.search(r"typedef\s+(?:struct|enum)\s+\w+\s*\{", lines[back]):
                    struct_at = re.search(r"typedef\s+(?:struct|enum)\s+(\w+)",
                                          lines[back]).group(1)
                    break
                if re.match(r"\s*\}", lines[back]):
                    break
            while k < len(lines):
                code = lines[k].split("/*")[0]
                if lines[k].lstrip().startswith("/*"):
                    if lines[k].lstrip().startswith("/* -"):
                        subject = section
                        break
                    # A comment followed by another documents a group: its subject is
                    # what it names before its first colon ("Presets").
                    subject = text.split(":")[0]
                    break
                if code.strip() and not code.strip().startswith("#if"):
                    subject = declared_name(code, struct_at)
                    break
                k += 1
        for sentence in split_sentences(text):
            claims.append((subject or section, sentence))
    return claims


def c_strings(text):
    """The value of a run of adjacent C string literals."""
    literal = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', text))
    return re.sub(r"\\(.)", r"\1", literal)


MACRO = re.compile(r"\b(LUMEN_CLAIM(?:_PROVEN_ELSEWHERE|_UNPROVEN)?)\s*\(")


def split_arguments(source, open_paren):
    """The macro's arguments (strings and commas outside strings), and where it ends."""
    args, current, i, in_string = [], [], open_paren + 1, False
    while True:
        c = source[i]
        if in_string:
            current.append(c)
            if c == "\\":
                current.append(source[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            current.append(c)
        elif c == ",":
            args.append("".join(current))
            current = []
        elif c == ")":
            args.append("".join(current))
            return args, i
        else:
            current.append(c)
        i += 1


def test_cases(path):
    """The names of the Catch2 TEST_CASEs of a source file."""
    source = path.read_text()
    return {c_strings(split_arguments(source, m.end() - 1)[0][0])
            for m in re.finditer(r"\bTEST_CASE\s*\(", source)}


def accounted(root):
    """[(kind, subject, sentence, file, extra arguments)] from the tests' macros."""
    entries = []
    for path in sorted((root / TESTS).glob("*_test.cc")):
        source = path.read_text()
        # A sentence quoted several times may be a macro of string literals.
        strings = {m.group(1): c_strings(m.group(2).replace("\\\n", " "))
                   for m in re.finditer(r'#define\s+(\w+)\s+((?:\\\n|[ \t]|"(?:[^"\\]|\\.)*")+)',
                                        source)}
        for m in MACRO.finditer(source):
            if source[:m.start()].rstrip().endswith("#define"):
                continue
            args, _ = split_arguments(source, m.end() - 1)
            values = [strings.get(a.strip(), c_strings(a)) for a in args]
            entries.append((m.group(1), squash(values[0]), squash(values[1]),
                            path.relative_to(root), values[2:]))
    return entries


def check(root, header_text=None):
    """The header's claims and the problems with their accounting."""
    sentences = set(header_sentences(root, header_text))
    claims = [key for key in header_sentences(root, header_text) if CLAIM_WORDS.search(key[1])]
    errors = []
    seen = {}
    for key in claims:
        seen[key] = seen.get(key, 0) + 1
    for (subject, sentence), count in seen.items():
        if count > 1:
            errors.append(f"lumen.h says twice under {subject}: \"{sentence}\" (reword one, so "
                          "that each claim has a name of its own)")
    covered = {}
    for kind, subject, sentence, path, extra in accounted(root):
        key = (subject, sentence)
        if key not in sentences:
            errors.append(f"{path}: {kind} quotes a sentence lumen.h does not have under "
                          f"{subject}: \"{sentence}\"")
        covered.setdefault(key, path)
        if kind == "LUMEN_CLAIM_PROVEN_ELSEWHERE":
            test_file, test_name = extra
            target = root / test_file
            if not target.is_file() or test_name not in test_cases(target):
                errors.append(f"{path}: \"{sentence}\" is said to be proven by TEST_CASE "
                              f"\"{test_name}\" in {test_file}, which does not exist")
        if kind == "LUMEN_CLAIM_UNPROVEN" and len(extra[0].strip()) < 10:
            errors.append(f"{path}: \"{sentence}\" is left unproven without a reason")
    for key in seen:
        if key not in covered:
            errors.append(f"lumen.h claims, under {key[0]}: \"{key[1]}\"; no test in "
                          f"{TESTS} accounts for it (LUMEN_CLAIM, LUMEN_CLAIM_PROVEN_ELSEWHERE "
                          "or LUMEN_CLAIM_UNPROVEN with a reason)")
    for file, text, subject, sentence in BINDING_REPEATS:
        if (subject, squash(sentence)) not in seen:
            errors.append(f"{file} repeats \"{sentence}\" ({subject}), which lumen.h no "
                          "longer says: bring the binding's documentation in line")
        if squash(text) not in doc_text(root / file):
            errors.append(f"{file} no longer says \"{text}\": update BINDING_REPEATS in "
                          f"{pathlib.Path(__file__).name}")
    return claims, errors


def self_test(root):
    """The checker catches a changed claim and a new one, and sees the claims it should."""
    header = (root / HEADER).read_text()
    failures = []
    claims, errors = check(root, header)
    if errors:
        failures.append("the header as it is has problems (run without --self-test)")
    subjects = {subject for subject, _ in claims}
    for expected in ("Conventions", "GPU engines", "lumen_status_string", "lumen_session_load",
                     "lumen_engine_options.num_threads", "lumen_engine_step_batch",
                     "Session stores", "Session memory budget"):
        if expected not in subjects:
            failures.append(f"no claim found under {expected}")
    # (what, text of the header, its replacement, what an error must quote)
    edits = [
        ("a bound changed", "32 + 56 * layers", "32 + 64 * layers", "32 + 64 * layers"),
        ("a status changed", "is LUMEN_ERROR_UNSUPPORTED with a message",
         "is LUMEN_ERROR_BACKEND with a message", "is LUMEN_ERROR_BACKEND with a message"),
        ("a claim added", "Writes the number of layers to *out.",
         "Writes the number of layers to *out. It is at most 2^20.", "It is at most 2^20."),
        ("a field's bound changed", "at most 1024;", "at most 2048;", "at most 2048;"),
    ]
    for name, old, new, quoted in edits:
        if old not in header:
            failures.append(f"{name}: the header no longer has \"{old}\" to edit")
            continue
        _, errors = check(root, header.replace(old, new, 1))
        if not any(quoted in error for error in errors):
            failures.append(f"{name} (\"{old}\" -> \"{new}\") went unnoticed")
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"self-test: {len(edits)} edits of the header, {len(failures)} failures")
    return 1 if failures else 0


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    if "--self-test" in sys.argv:
        return self_test(root)
    claims, errors = check(root)
    if "--list" in sys.argv:
        for subject, sentence in claims:
            print(f"{subject}: {sentence}")
        return 0
    for error in errors:
        print(error, file=sys.stderr)
    covered = len(set(claims)) - sum(1 for error in errors if error.startswith("lumen.h claims"))
    print(f"{len(set(claims))} claims in lumen.h, {covered} accounted for, {len(errors)} "
          "problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
