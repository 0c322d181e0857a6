#!/usr/bin/env python3
"""Sample lengths from a text corpus on disk, one per line, for --lengths.

    corpus_lengths.py DIR > lengths.txt

Every text document under DIR (recursively; .gz files are read decompressed;
binary files are skipped) is one sample. It is tokenised simply: a token is
a run of letters and digits, or one punctuation character. This is not a
model's tokenizer, but it keeps the shape of the length distribution, which
is what the balancer sees. A summary goes to stderr.
"""
import gzip
import os
import re
import statistics
import sys

TOKEN = re.compile(r"\w+|[^\w\s]")
SNIFF = 4096  # bytes looked at to tell text from binary


def read_text(path):
    """The document's text, or None when it is not text."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError):
        return None
    if b"\0" in data[:SNIFF]:
        return None
    return data.decode("utf-8", errors="replace")


def lengths(root):
    for base, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(base, name)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            text = read_text(path)
            if text:
                n = sum(1 for _ in TOKEN.finditer(text))
                if n:
                    yield n


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print("usage: corpus_lengths.py DIR (a directory of text documents)",
              file=sys.stderr)
        return 2
    found = list(lengths(sys.argv[1]))
    if not found:
        print("corpus_lengths: no text documents under %s" % sys.argv[1],
              file=sys.stderr)
        return 1
    sys.stdout.write("".join("%d\n" % n for n in found))
    q = statistics.quantiles(found, n=10) if len(found) > 1 else found * 9
    print("corpus_lengths: %d documents, median %d tokens, p90 %d, max %d"
          % (len(found), statistics.median(found), q[-1], max(found)),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
