#!/usr/bin/env python3
"""tests/ops: every path of this repository that a comment or a document
names exists (issue 32: config/gpusysd.conf still named daemon/poller.c after
it moved to daemon/core/poller.c).

check-paths.py SOURCE_ROOT

Looks in the comments of sources, scripts, build files and units, and in
the whole text of manuals and Markdown, for words that start with one of the
repository's top-level directories (daemon/..., docs/X.md, scripts/test) and
checks each against the tree. Code itself is left out: a script's command
line names build outputs (daemon/gpusysd in a build directory), an
#include a system header (systemd/sd-daemon.h). A
word inside a longer path (/usr/include/gpusys/device/..., build/daemon/...)
is not one of ours and is skipped, as are globs and placeholders (*, X, N,
<...>) and the names of build outputs listed in GENERATED.

Comments of code also name files by their bare name ("wake_cuda.c: a
stream wait", "see abi.h"): each such name of a C or CUDA source or header
must be the name of some file of the tree (issue 31), unless it is a
header from outside it (EXTERNAL). Documents are left out of that check:
they name the reader's own files (prog.c).

Prints each missing path with FILE:LINE; exit 1 if any.

check-paths.py --self-test: runs the check on a scratch tree holding one
stale path and one stale bare name, and fails unless both are reported.
"""
import os
import re
import sys

# Directories at the top of the tree whose paths documents name.
TOP = ('bench', 'common', 'config', 'contrib', 'daemon', 'debian', 'device', 'docs', 'examples', 'include',
       'libclient', 'man', 'scripts', 'systemd', 'tests', 'tools')
# Files whose text is scanned: sources, scripts and documents.
SCANNED = re.compile(r'(\.(c|h|cu|cuh|py|sh|md|conf|build|txt|1|3|5|8|service|socket|map|yml|yaml|in)'
                     r'|^(meson\.build|test|demo|lib\.sh|device-build|device-print|fetch-device-debs|run|rules|control))$')
SKIP_DIRS = {'.git', '.debs', 'subprojects', '__pycache__', 'corpus'}
# Produced by the build, named as such (build/.../config.h and the like).
GENERATED = {'man/gpusysd.conf.5'}

# Headers from outside the tree that comments name by their bare name.
EXTERNAL = {'cuda.h', 'nvml.h', 'barrier.h'}  # the CUDA driver, NVML, liburing's barriers

C_COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*', re.S)
DOCUMENT = re.compile(r'\.(md|txt|[1358])$')
C_LIKE = re.compile(r'\.(c|h|cu|cuh|map)$')


def commented(name, text):
    """The text of a file a reader takes as prose: a document whole; of
    code, its comments (the rest blanked, so lines keep their numbers)."""
    if DOCUMENT.search(name):
        return text
    if C_LIKE.search(name):
        out = []
        last = 0
        for m in C_COMMENT.finditer(text):
            out.append(re.sub(r'[^\n]', ' ', text[last:m.start()]))
            out.append(m.group(0))
            last = m.end()
        out.append(re.sub(r'[^\n]', ' ', text[last:]))
        return ''.join(out)
    # '#' comments: scripts, meson, units, the configuration, YAML.
    lines = []
    for line in text.splitlines():
        m = re.search(r'(^|\s)#', line)
        lines.append(line[m.end():] if m else '')
    return '\n'.join(lines)


PATH = re.compile(r'(?<![\w./~$-])((?:%s)/[\w./+-]*[\w+])' % '|'.join(TOP))


def candidates(text):
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in PATH.finditer(line):
            p = m.group(1)
            end = m.end(1)
            # A glob or a placeholder: not a path of the tree.
            if end < len(line) and line[end] in '*<{':
                continue
            if re.search(r'(^|/)([A-Z]|[A-Z]+\.md|NAME|N|X|FILE)$', p) or '*' in p:
                continue
            yield lineno, p.rstrip('.')


# A bare file name in a comment (no directory before it): wake_cuda.c, abi.h.
BARE = re.compile(r'(?<![\w./~$<*-])([A-Za-z_][\w-]*\.(?:c|h|cu|cuh))(?![\w/*])')


def bare_names(name, text):
    """Code only: the bare names of C and CUDA files its comments give."""
    if DOCUMENT.search(name):
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in BARE.finditer(line):
            if m.group(1) not in EXTERNAL:
                yield lineno, m.group(1)


# A relative path that climbs out of its directory ([RESULTS](../bench/RESULTS.md)).
UP = re.compile(r'(?<![\w./~$-])((?:\.\./)+[\w./+-]*[\w+])')


def up_paths(name, text):
    """Documents only: links and commands that climb (../bench/RESULTS.md)."""
    if not DOCUMENT.search(name):
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith(('    ', '\t')):
            continue  # a command in a code block (apt-get install ../x.deb: build outputs)
        for m in UP.finditer(line):
            yield lineno, m.group(1)


def targets(root):
    """Names of the programs meson builds (executable('gpusys-bench', ...)):
    a document may name one by its directory (bench/gpusys-bench)."""
    names = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(('.', 'build'))]
        if 'meson.build' in files:
            names |= set(re.findall(r"executable\(\s*'([^']+)'", open(os.path.join(d, 'meson.build')).read()))
    return names


def exists(root, p, programs):
    if p in GENERATED or os.path.exists(os.path.join(root, p)):
        return True
    # A program named by its source without the extension
    # (tests/gpu/test_allwarps), or a target of the build in its directory.
    if any(os.path.exists(os.path.join(root, p + ext)) for ext in ('.c', '.cu', '.py', '.sh')):
        return True
    return os.path.basename(p) in programs and os.path.isdir(os.path.join(root, os.path.dirname(p)))


def check(root):
    """The missing mentions under root, and how many were checked."""
    programs = targets(root)
    names = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith(('.', 'build'))]
        names |= set(files)
    build_dirs = {d for d in os.listdir(root) if d.startswith('build')}
    missing, checked = [], 0
    for d, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(d, root)
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not (rel_dir == '.' and x in build_dirs)
                         and not x.startswith('.'))
        for f in sorted(files):
            if not SCANNED.search(f):
                continue
            path = os.path.join(d, f)
            if os.path.realpath(path) == os.path.realpath(__file__):
                continue  # its own examples of stale paths
            try:
                text = open(path, encoding='utf-8').read()
            except (UnicodeDecodeError, OSError):
                continue
            for lineno, p in candidates(commented(f, text)):
                checked += 1
                if exists(root, p, programs):
                    continue
                missing.append('%s:%d: %s does not exist' % (os.path.relpath(path, root), lineno, p))
            for lineno, p in bare_names(f, commented(f, text)):
                checked += 1
                if p in names:
                    continue
                missing.append('%s:%d: no file of the tree is named %s' % (os.path.relpath(path, root), lineno, p))
            # Relative to the document, inside the tree (a tool beside the
            # checkout is no part of it).
            for lineno, p in up_paths(f, text):
                checked += 1
                full = os.path.realpath(os.path.join(d, p))
                if full.startswith(root + os.sep) and os.path.exists(full):
                    continue
                missing.append('%s:%d: %s is not in this repository' % (os.path.relpath(path, root), lineno, p))
    return missing, checked


def self_test():
    """The check finds a stale path and a stale bare name, and passes a
    tree without them."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, 'daemon', 'core'))
        src = os.path.join(root, 'daemon', 'core', 'here.c')
        with open(src, 'w') as f:
            f.write('/* as in daemon/core/here.c and here.c, see cuda.h */\nint x; /* gone.c */\n'
                    '/* daemon/gone/file.c */\n')
        missing, _ = check(root)
        want = ['daemon/core/here.c:2: no file of the tree is named gone.c',
                'daemon/core/here.c:3: daemon/gone/file.c does not exist']
        if sorted(missing) != sorted(want):
            print('self-test: expected %s, got %s' % (want, missing))
            return 1
        with open(src, 'w') as f:
            f.write('/* as in daemon/core/here.c and here.c */\n')
        missing, _ = check(root)
        if missing:
            print('self-test: a clean tree reported %s' % missing)
            return 1
    print('self-test: both stale mentions reported, the clean tree passed')
    return 0


def main():
    if sys.argv[1] == '--self-test':
        return self_test()
    root = os.path.realpath(sys.argv[1])
    missing, checked = check(root)
    for m in missing:
        print(m)
    print('%d path mentions checked, %d missing' % (checked, len(missing)))
    if checked < 50:
        print('fewer than 50 mentions found: the check itself is broken')
        return 1
    return 1 if missing else 0


if __name__ == '__main__':
    sys.exit(main())
