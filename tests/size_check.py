#!/usr/bin/env python3
"""No source file over ~800 lines, no function over 150 (issue 26).

Usage: size_check.py SOURCE_ROOT. Checks the .cc and .h files under src/ and
include/. A file may pass MAX_FILE_LINES, or a function MAX_FUNCTION_LINES,
only with a comment saying why: `// size: <reason>` in the file's first 20
lines, or `// long: <reason>` in the 5 lines above the function. Functions
are found by brace matching on the text with comments and literals blanked:
a block whose head has a parenthesis and is not a control statement, a
class, namespace or lambda inside another function.
"""
import os
import re
import sys

MAX_FILE_LINES = 850  # "~800"
MAX_FUNCTION_LINES = 150


def blank(src):
    """The text with comments and string/char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
        elif src.startswith('R"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', src[i:])
            if not m:
                out.append(src[i])
                i += 1
                continue
            end = src.find(')' + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
        elif src[i] in '"\'':
            j = i + 1
            while j < n and src[j] != src[i] and src[j] != '\n':
                j += 2 if src[j] == '\\' else 1
            j += 1
        else:
            out.append(src[i])
            i += 1
            continue
        out.append(re.sub(r'[^\n]', ' ', src[i:j]))
        i = j
    return ''.join(out)


CONTROL = re.compile(r'\b(if|for|while|switch|catch)\s*\(')
TYPE = re.compile(r'^\s*(template\s*<.*>\s*)?(namespace|class|struct|enum|union|extern)\b')


def functions(text):
    """(first line, last line) of each outermost function body."""
    stack, last, found = [], 0, []
    line = 1
    for i, c in enumerate(text):
        if c == '\n':
            line += 1
        elif c == '{':
            head = text[last:i]
            head_line = head.strip().split('\n')[-1] if head.strip() else ''
            inside = any(kind == 'fn' for kind, _ in stack)
            is_fn = (not inside and '(' in head and not TYPE.match(head_line) and not CONTROL.search(head_line))
            stack.append(('fn' if is_fn else 'block', line))
            last = i + 1
        elif c == '}':
            if stack:
                kind, start = stack.pop()
                if kind == 'fn':
                    found.append((start, line))
            last = i + 1
        elif c == ';':
            last = i + 1
    return found


def main():
    root = sys.argv[1]
    problems, checked = [], 0
    for top in ('src', 'include'):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(('.cc', '.h')):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                src = open(path, encoding='utf-8', errors='replace').read()
                lines = src.split('\n')
                checked += 1
                if len(lines) > MAX_FILE_LINES and not any('// size:' in l for l in lines[:20]):
                    problems.append(f'{rel}: {len(lines)} lines (over {MAX_FILE_LINES}, no "// size:" reason)')
                for start, end in functions(blank(src)):
                    if end - start + 1 <= MAX_FUNCTION_LINES:
                        continue
                    above = lines[max(0, start - 6):start]
                    if not any('// long:' in l for l in above):
                        problems.append(f'{rel}:{start}: function of {end - start + 1} lines '
                                        f'(over {MAX_FUNCTION_LINES}, no "// long:" reason above it)')
    for p in problems:
        print(p)
    print(f'size_check: {checked} files, {len(problems)} over the limits')
    return 1 if problems or checked == 0 else 0


if __name__ == '__main__':
    sys.exit(main())
