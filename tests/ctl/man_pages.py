#!/usr/bin/env python3
"""man_pages.py — each man page documents exactly its binary's options, and
man renders it cleanly.

For ckptfs(8), ckptfs-stat(1) and ckptfs-ctl(1):
  - the options of `--help` (ckptfs-ctl: `help`) and those of the man page
    are the same set, both ways.  From the help text: dash options in the
    usage line; the first word and every dash word of each entry in the
    two-space-indented left column (`cache_size=SIZE` counts as cache_size,
    `drain MOUNT [--timeout S]` as drain and --timeout); the comma lists
    after "passed on:" and "expects:".  From the page, in the sections
    OPTIONS, MOUNT OPTIONS, FUSE OPTIONS and COMMANDS: the first bold word
    and every bold dash word of each .TP tag outside .RS blocks, and in FUSE
    OPTIONS every bold word (the pages keep bold for option names there);
  - the page's .TH names the binary, its section is the file's, and its
    version is the one `ckptfs --version` prints;
  - `MANWIDTH=80 man --warnings -l PAGE` prints no warning and no line wider
    than 80 columns (skipped, with a note, where man or groff is missing).
Run by ctest with CKPTFS_BIN and CKPTFS_SOURCE_DIR set; exit 0, 1 or 77.
"""
import os
import re
import shutil
import subprocess
import sys

OPTION_SECTIONS = {"OPTIONS", "MOUNT OPTIONS", "FUSE OPTIONS", "COMMANDS"}
LIST_SECTIONS = {"FUSE OPTIONS"}
ESCAPES = {"-": "-", "&": "", "%": "", "e": "\\", " ": " ", "|": "", "^": "", ",": "", "/": ""}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def norm(word):
    """An option word as both sides name it: no brackets, value or punctuation."""
    word = word.strip("[](),;")
    word = word.split("=", 1)[0] if "=" in word[1:] else word
    return word.rstrip(".,;")


# ---- the help text ----------------------------------------------------------

def help_options(text):
    lines = text.splitlines()
    opts = set()
    usage = lines[0].split(None, 2)[2] if lines and lines[0].startswith("usage:") else ""
    opts |= {norm(w) for w in re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", usage)}
    for line in lines[1:]:
        m = re.match(r"  (\S.*?)(?:\s{2,}|$)", line)
        if not m:
            continue
        words = m.group(1).replace(",", " ").split()
        opts.add(norm(words[0]))
        opts |= {norm(w) for w in words[1:] if w.lstrip("[").startswith("-")}
    flat = " ".join(l for l in lines if not l.startswith("  "))
    for seg in re.findall(r"(?:passed on|expects):\s*(.*?)\.(?:\s|$)", flat):
        opts |= {norm(item.strip()) for item in seg.split(",") if item.strip()}
    opts.discard("")
    return opts


# ---- the man page -------------------------------------------------------------

def roff_args(s):
    """Split macro arguments: blanks separate, double quotes group."""
    args, cur, quoted, started, i = [], "", False, False, 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            cur += s[i:i + 2]
            started = True
            i += 2
        elif c == '"':
            if quoted and s[i + 1:i + 2] == '"':
                cur += '"'
                i += 2
                continue
            quoted = not quoted
            started = True
            i += 1
        elif c == " " and not quoted:
            if started:
                args.append(cur)
            cur, started = "", False
            i += 1
        else:
            cur += c
            started = True
            i += 1
    if started:
        args.append(cur)
    return args


def bold_runs(segments):
    """The bold text in [(text, font)], following \\fB, \\fI, \\fR and \\fP."""
    runs = []
    for text, font in segments:
        prev, cur, buf, i = font, font, "", 0
        while i < len(text):
            if text.startswith("\\f", i) and i + 2 < len(text):
                name, i = text[i + 2], i + 3
                if cur == "B" and buf:
                    runs.append(buf)
                buf = ""
                prev, cur = cur, (prev if name == "P" else name)
            elif text[i] == "\\" and i + 1 < len(text):
                nxt = text[i + 1]
                if nxt == "(":
                    ch, i = "?", i + 4
                elif nxt == "[":
                    ch, i = "?", text.index("]", i) + 1
                else:
                    ch, i = ESCAPES.get(nxt, nxt), i + 2
                buf += ch if cur == "B" else ""
            else:
                buf += text[i] if cur == "B" else ""
                i += 1
        if cur == "B" and buf:
            runs.append(buf)
    return runs


def line_segments(line):
    """A source line as [(text, font)]: macro arguments get the macro's fonts.
    A reference to another page (.BR name (N)) is no option: nothing."""
    if not line.startswith("."):
        return [(line, "R")]
    parts = line[1:].split(None, 1)
    macro, rest = parts[0], parts[1] if len(parts) > 1 else ""
    args = roff_args(rest)
    if macro == "BR" and len(args) > 1 and re.match(r"\(\d", args[1]):
        return []
    if macro in ("B", "I"):
        return [(" ".join(args), macro)]
    if len(macro) == 2 and set(macro) <= set("BIR"):
        return [(a, macro[k % 2]) for k, a in enumerate(args)]
    return []


def page_options(path):
    section, depth, tag_next = "", 0, False
    opts, th = set(), None
    for raw in open(path, encoding="utf-8"):
        line = raw.rstrip("\n")
        if line.startswith(('.\\"', "'\\\"")):
            continue
        macro = line[1:].split(None, 1)[0] if line.startswith(".") and len(line) > 1 else ""
        if macro == "TH":
            th = roff_args(line[3:])
        if macro in ("SH", "SS"):
            title = " ".join(roff_args(line[3:]))
            section = title if macro == "SH" else section
            section = title if macro == "SS" and title in OPTION_SECTIONS else section
            depth, tag_next = 0, False
            continue
        if macro == "RS":
            depth += 1
        elif macro == "RE":
            depth = max(0, depth - 1)
        if macro == "TP":
            tag_next = True
            continue
        is_tag, tag_next = tag_next, False
        if section not in OPTION_SECTIONS:
            continue
        words = [w for run in bold_runs(line_segments(line)) for w in run.replace(",", " ").split()]
        if section in LIST_SECTIONS:
            opts |= {norm(w) for w in words}
        elif is_tag and depth == 0 and words:
            opts.add(norm(words[0]))
            opts |= {norm(w) for w in words[1:] if w.startswith("-")}
    opts.discard("")
    return opts, th


# ---- rendering ------------------------------------------------------------------

def check_render(page):
    if not shutil.which("man") or not shutil.which("groff"):
        print(f"note: man or groff is not installed; {page} is not rendered", file=sys.stderr)
        return
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="")
    r = subprocess.run(["man", "--warnings", "-l", page], env=env, capture_output=True,
                       text=True)
    if r.returncode != 0 or r.stderr.strip():
        fail(f"man --warnings -l {page}: exit {r.returncode}\n{r.stderr}")
    text = re.sub(r".\x08", "", r.stdout)
    if "NAME" not in text:
        fail(f"man -l {page} rendered no NAME section")
    for n, l in enumerate(text.splitlines(), 1):
        if len(l) > 80:
            fail(f"{page}: rendered line {n} is {len(l)} columns wide: {l}")


def main():
    daemon = os.environ.get("CKPTFS_BIN")
    src = os.environ.get("CKPTFS_SOURCE_DIR")
    if not daemon or not src:
        print("skip: CKPTFS_BIN and CKPTFS_SOURCE_DIR are not set (run through ctest)",
              file=sys.stderr)
        return 77
    tools = os.path.dirname(daemon)
    # Leaks at exit are not this test's subject (and in a sanitizer build a
    # leak report would swallow the help text): the other tests catch them.
    os.environ["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    version = subprocess.run([daemon, "--version"], capture_output=True, text=True).stdout.strip()
    pages = [
        ("ckptfs", "8", [daemon, "--help"]),
        ("ckptfs-stat", "1", [os.path.join(tools, "ckptfs-stat"), "--help"]),
        ("ckptfs-ctl", "1", [os.path.join(tools, "ckptfs-ctl"), "help"]),
    ]
    for name, sect, argv in pages:
        page = os.path.join(src, "docs", f"{name}.{sect}")
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0 or r.stderr:
            fail(f"{' '.join(argv)}: exit {r.returncode}, stderr {r.stderr!r}")
        if name == "ckptfs-ctl":
            alt = subprocess.run(argv[:1] + ["--help"], capture_output=True, text=True)
            if alt.stdout != r.stdout:
                fail("ckptfs-ctl --help and ckptfs-ctl help differ")
        from_help = help_options(r.stdout)
        from_page, th = page_options(page)
        if len(from_help) < 4:
            fail(f"found only {sorted(from_help)} in {name}'s help: is the parser broken?")
        for o in sorted(from_help - from_page):
            fail(f"{name}: '{o}' is in --help but not in {os.path.basename(page)}")
        for o in sorted(from_page - from_help):
            fail(f"{name}: '{o}' is in {os.path.basename(page)} but not in --help")
        want_th = [name.upper(), sect]
        if not th or [t.replace("\\-", "-") for t in th[:2]] != want_th:
            fail(f"{page}: .TH {th} should start with {want_th}")
        elif len(th) < 4 or th[3] != version:
            fail(f"{page}: .TH says version {th[3] if len(th) > 3 else None!r}, "
                 f"the daemon {version!r}")
        check_render(page)
        print(f"{name}: {len(from_help)} options in --help, {len(from_page)} in the page")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
