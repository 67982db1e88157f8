#!/usr/bin/env python3
"""layers_test: the house rules of docs/architecture.md, checked on the source tree.

1. A folder includes only folders of a lower layer (LAYERS), its own files and its own subfolders.
2. No folder includes a file of its parent folder (engine/operations/ never includes engine/applier.h).
3. No production file (every folder but tests/ and bench/) is longer than MAX_LINES.

Usage: layers_test.py ROOT   checks ROOT and prints each violation; exit 1 when there is one.
       layers_test.py --self-test   builds a small tree that breaks each rule and checks that each is caught.
"""
import os
import re
import sys
import tempfile

# LAYERS: each top-level folder's layer; a folder may include folders of a lower layer only.
LAYERS = {
    'base': 0,
    'scheduler': 1,
    'storage': 2, 'protocol': 2, 'metrics': 2,
    'engine': 3,
    'api': 4, 'agent': 4, 'planner': 4,
    'bench': 5,
    'cli': 6,
}
# EXCEPTIONS: includes across equal layers that the design names. The planner reads task definitions with the
# server's own codec (gpupack::ecs_codec, a library of api/ecs/codec.cc alone: no HTTP, no engine).
EXCEPTIONS = {('planner', 'api/ecs/codec.h')}
PRODUCTION = [d for d in LAYERS if d != 'bench']
MAX_LINES = 750
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def violations(root):
    out = []
    for top in LAYERS:
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(('.cc', '.h')):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root)
                here = os.path.dirname(rel)
                with open(path, encoding='utf-8', errors='replace') as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    inc_top, inc_dir = inc.split('/')[0], os.path.dirname(inc)
                    if inc_top not in LAYERS:
                        continue  # generated files and third-party headers
                    if inc_top != top and LAYERS[inc_top] >= LAYERS[top] and (top, inc) not in EXCEPTIONS:
                        out.append(f'{rel}: includes {inc}, which is not below {top}/')
                    if inc_dir != here and here.startswith(inc_dir + '/'):
                        out.append(f'{rel}: includes {inc} of its parent folder {inc_dir}/')
                lines = text.count('\n')
                if top in PRODUCTION and lines > MAX_LINES:
                    out.append(f'{rel}: {lines} lines (production files stay under {MAX_LINES})')
    return out


def self_test():
    cases = {
        'scheduler/a.h': '#include "engine/applier.h"\n',                  # rule 1: upwards
        'engine/operations/b.cc': '#include "engine/applier.h"\n',         # rule 2: the parent folder
        'api/c.cc': '\n' * (MAX_LINES + 1),                                # rule 3: too long
        'engine/core/ok.h': '#include "scheduler/model.h"\n#include "engine/core/x.h"\n',
        'planner/ok.cc': '#include "api/ecs/codec.h"\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in cases.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), 'w') as f:
                f.write(text)
        found = violations(root)
    expected = ['scheduler/a.h', 'engine/operations/b.cc', 'api/c.cc']
    missed = [e for e in expected if not any(v.startswith(e + ':') for v in found)]
    extra = [v for v in found if not any(v.startswith(e + ':') for e in expected)]
    for m in missed:
        print(f'self-test: the violation in {m} was not caught')
    for e in extra:
        print(f'self-test: a false violation: {e}')
    print(f'self-test: {len(expected) - len(missed)} of {len(expected)} violations caught, {len(extra)} false')
    return 1 if missed or extra else 0


def main():
    if len(sys.argv) == 2 and sys.argv[1] == '--self-test':
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    found = violations(sys.argv[1])
    for v in found:
        print(v)
    print(f'layers: {len(found)} violation(s)')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
