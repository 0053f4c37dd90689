#!/usr/bin/env python3
"""The documentation's shape: README.md stays a front door (at most
15,000 bytes), the pages it promises exist, and every link in every
Markdown file of the repository resolves inside the repository (to a file
that exists, and to a heading of it when the link names one). Web links
(http, https, mailto) are allowed; absolute paths, paths that climb out of
the repository and paths of the machine that wrote the page are not.

    check_docs.py SOURCE_ROOT
"""
import os
import re
import subprocess
import sys

README_LIMIT = 15000
PAGES = [
    "README.md", "LICENSE", "CONTRIBUTING.md", "SECURITY.md",
    "docs/architecture.md", "docs/security.md", "docs/operations.md", "docs/python.md",
    "docs/onnx.md", "docs/onnx-conformance.md", "docs/gpu.md", "docs/benchmarks.md",
    "docs/ops.md", "eval/README.md", "eval/REPORT.md",
]
# Text that names a place outside the repository even when it is no link.
OUTSIDE = re.compile(r"\.\./shared/|(?<![\w.])/work/|(?<![\w.])/root/|(?<![\w.])/home/")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HREF = re.compile(r"""<a\s[^>]*href=["']([^"']+)["']""", re.I)
WEB = re.compile(r"^(https?:|mailto:)", re.I)


def markdown_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", "*.md"],
                             capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f]
        if files:
            return sorted(files)
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []  # not a git checkout (an unpacked tarball): walk it
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
        found += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(".md")]
    return sorted(found)


def prose_lines(text, keep_code=False):
    """(line number, line) outside fenced code blocks, inline code removed
    unless keep_code."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * 3
            elif line.strip().startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, line if keep_code else re.sub(r"(`+)(?:(?!\1).)+?\1", "", line)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for _, line in prose_lines(text, keep_code=True):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.add(base if k == 0 else f"{base}-{k}")
    for m in re.finditer(r"""<a\s+(?:name|id)=["']([^"']+)["']""", text):
        out.add(m.group(1))
    return out


def check_link(root, page, target):
    if WEB.match(target):
        return None
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
        return f"a {target.split(':')[0]}: link leaves the repository"
    path, _, frag = target.partition("#")
    if path.startswith("/"):
        return "an absolute path leaves the repository"
    here = os.path.join(root, page)
    dest = os.path.normpath(os.path.join(os.path.dirname(here), path)) if path else here
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(dest)]) != real_root:
        return "climbs out of the repository"
    if not os.path.exists(dest):
        return "no such file in the repository"
    if frag and dest.endswith(".md") and frag not in anchors(dest):
        return f"{os.path.relpath(dest, root)} has no heading #{frag}"
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    errors = []
    size = os.path.getsize(os.path.join(root, "README.md"))
    if size > README_LIMIT:
        errors.append(f"README.md: {size} bytes, more than {README_LIMIT}: move detail to docs/")
    for p in PAGES:
        if not os.path.isfile(os.path.join(root, p)):
            errors.append(f"{p}: missing")
    files = markdown_files(root)
    links = 0
    for page in files:
        with open(os.path.join(root, page), encoding="utf-8") as f:
            text = f.read()
        for n, line in prose_lines(text):
            targets = [m.group(1) for m in LINK.finditer(line)]
            targets += [m.group(1) for m in HREF.finditer(line)]
            m = REF_DEF.match(line)
            if m:
                targets.append(m.group(1))
            for t in targets:
                links += 1
                why = check_link(root, page, t)
                if why:
                    errors.append(f"{page}:{n}: link {t}: {why}")
        for n, line in enumerate(text.split("\n"), 1):
            m = OUTSIDE.search(line)
            if m:
                errors.append(f"{page}:{n}: names {m.group(0)!r}, a place outside the repository")
    for e in errors:
        print(e)
    print(f"{len(files)} Markdown files, {links} links, README.md {size} bytes: "
          f"{'ok' if not errors else f'{len(errors)} problems'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
