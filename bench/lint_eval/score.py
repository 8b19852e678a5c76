"""Score `hotloop lint` against hand-labelled public training scripts: precision and recall per rule.

    python bench/lint_eval/score.py --root /work/lint_corpus            # table per rule
    python bench/lint_eval/score.py --root DIR --show                    # plus every FP and FN
    python bench/lint_eval/score.py --root DIR --download                # fetch the files first
    python bench/lint_eval/score.py --root DIR --mirror /work/.mirror    # or copy them out of git snapshots
    python bench/lint_eval/score.py --root WHOLE --mirror /work/.mirror --whole   # whole checkouts (.py files)

The public files are not in this repository (their licences are theirs): each `labels/*.json` names
the repo, the commit and the paths, and `--download` reads them from raw.githubusercontent.com at that
commit into `DIR/<owner>+<name>/<path>`; where there is no web, `--mirror M` reads them with `git show
<commit>:<path>` from snapshots at `M/<owner>+<name>/` (a bare git directory, `repo/` or `repo/.git/`).
By default only the labelled files and their one-level `context` are copied, so lint's cross-file pass sees
what the labeller listed; `--whole` copies every Python file of the repository at the commit (plus the
README/setup files that mark its root), as in a user's checkout: helpers two files deep, and the project
classes `classes.guess` chooses among, are all there. Use a separate `--root` for each setting.
A lint finding is a true positive when a label of the same code covers its line (`line`..`end_line`);
labels no finding matches are false negatives.
See LABELING.md for what counts as real.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import urllib.request
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from hotloop.lint import lint_source  # noqa: E402
from hotloop.lint.callers import linting  # noqa: E402


def load_labels(only: list[str] | None = None) -> list[dict]:
    out = []
    for f in sorted((HERE / "labels").glob("*.json")):
        doc = json.loads(f.read_text())
        if only and doc["project"] not in only:
            continue
        out.append(doc)
    return out


def local_path(root: Path, doc: dict, path: str) -> Path:
    return root / doc["repo"].replace("/", "+") / path


def download(root: Path, docs: list[dict]) -> None:
    for doc in docs:
        # Each labelled file, and the project modules it imports (`context`), which lint's cross-file pass reads.
        paths = sorted({p for f in doc["files"] for p in [f["path"], *f.get("context", [])]})
        for path in paths:
            dest = local_path(root, doc, path)
            if dest.exists():
                continue
            url = f"https://raw.githubusercontent.com/{doc['repo']}/{doc['commit']}/{path}"
            dest.parent.mkdir(parents=True, exist_ok=True)
            with urllib.request.urlopen(url, timeout=60) as r:  # noqa: S310 (a fixed https host)
                dest.write_bytes(r.read())
            print(f"fetched {url}", file=sys.stderr)


ROOT_FILES = ("README.md", "README.rst", "setup.py", "setup.cfg", "pyproject.toml", "requirements.txt")


def _tree(git: Path, commit: str) -> list[str]:
    """The Python files (and root markers) of the repository at `commit`."""
    r = subprocess.run(["git", "--git-dir", str(git), "ls-tree", "-r", "--name-only", commit],
                       capture_output=True, text=True, check=False)  # fmt: skip
    return [p for p in r.stdout.splitlines() if p.endswith(".py") or p.rpartition("/")[2] in ROOT_FILES]


def from_mirror(root: Path, mirror: Path, docs: list[dict], whole: bool = False) -> list[str]:
    """Copy each labelled file (and its context; with `whole`, every Python file of the repository) out of a
    local git snapshot; returns what is absent."""
    absent = []
    for doc in docs:
        base = mirror / doc["repo"].replace("/", "+")
        gits = [g for g in (base / "repo" / ".git", base / "repo", base) if (g / "HEAD").is_file()]
        paths = sorted({p for f in doc["files"] for p in [f["path"], *f.get("context", [])]})
        if whole and gits and not local_path(root, doc, ".whole").exists():
            r = subprocess.run(["git", "--git-dir", str(gits[0]), "archive", doc["commit"], "--",
                                *_tree(gits[0], doc["commit"])], capture_output=True, check=False)  # fmt: skip
            if r.returncode == 0:
                dest = local_path(root, doc, "")
                dest.mkdir(parents=True, exist_ok=True)
                with tarfile.open(fileobj=io.BytesIO(r.stdout)) as t:
                    t.extractall(dest, members=[m for m in t.getmembers() if m.isfile()], filter="data")
                local_path(root, doc, ".whole").touch()
        for path in paths:
            dest = local_path(root, doc, path)
            if dest.exists():
                continue
            if not gits:
                absent.append(f"{doc['repo']}: no snapshot under {base}")
                break
            show = ["git", "--git-dir", str(gits[0]), "show", f"{doc['commit']}:{path}"]
            r = subprocess.run(show, capture_output=True, check=False)
            if r.returncode:
                absent.append(
                    f"{doc['repo']}@{doc['commit'][:10]}:{path}: {r.stderr.decode(errors='replace').strip()[:120]}"
                )
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(r.stdout)
    return absent


def score(root: Path, docs: list[dict]) -> tuple[dict, list[str], list[str], int]:
    per = defaultdict(lambda: {"tp": 0, "fp": 0, "fn": 0})
    fps, fns, missing = [], [], 0
    for doc in docs:
        # One lint run per project over its labelled files, as `hotloop lint <files>` would lint them.
        run = [local_path(root, doc, f["path"]) for f in doc["files"]]
        for f in doc["files"]:
            p = local_path(root, doc, f["path"])
            if not p.exists():
                missing += 1
                continue
            with linting([x for x in run if x.exists()]):
                found = lint_source(p.read_text(encoding="utf-8-sig"), str(p))
            labels = [dict(lab, hit=False) for lab in f.get("findings", [])]
            for hit in found:
                match = next((lab for lab in labels if lab["code"] == hit.code and not lab["hit"]
                              and lab["line"] <= hit.line <= lab.get("end_line", lab["line"])), None)  # fmt: skip
                if match is None:  # a second finding on an already matched label is not a new FP
                    match = next((lab for lab in labels if lab["code"] == hit.code
                                  and lab["line"] <= hit.line <= lab.get("end_line", lab["line"])), None)  # fmt: skip
                    if match is not None:
                        continue
                    per[hit.code]["fp"] += 1
                    fps.append(f"FP {doc['project']}:{f['path']}:{hit.line} {hit.code} {hit.message}")
                else:
                    match["hit"] = True
                    per[hit.code]["tp"] += 1
            for lab in labels:
                if not lab["hit"]:
                    per[lab["code"]]["fn"] += 1
                    fns.append(f"FN {doc['project']}:{f['path']}:{lab['line']} {lab['code']} {lab.get('why', '')}")
    return per, fps, fns, missing


def pct(a: int, b: int) -> str:
    return f"{100 * a / b:5.1f}%" if b else "    -"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default="/work/lint_corpus", help="where the public files are (or go)")
    ap.add_argument("--download", action="store_true", help="fetch missing files at the labelled commits")
    ap.add_argument("--mirror", help="copy missing files out of git snapshots under this folder")
    ap.add_argument("--whole", action="store_true", help="with --mirror: every Python file of each repository")
    ap.add_argument("--show", action="store_true", help="list every false positive and false negative")
    ap.add_argument("--project", action="append", help="score only these projects")
    args = ap.parse_args()
    root, docs = Path(args.root), load_labels(args.project)
    if args.download:
        download(root, docs)
    if args.mirror:
        for line in from_mirror(root, Path(args.mirror), docs, args.whole):
            print(f"not in the snapshot: {line}", file=sys.stderr)
    per, fps, fns, missing = score(root, docs)
    n_files = sum(len(d["files"]) for d in docs)
    print(f"{n_files - missing} files from {len(docs)} projects ({', '.join(d['repo'] for d in docs)})")
    if missing:
        print(f"{missing} files missing under {root}: run with --download")
    print(f"{'rule':6} {'TP':>4} {'FP':>4} {'FN':>4} {'precision':>10} {'recall':>8}")
    tot = {"tp": 0, "fp": 0, "fn": 0}
    for code in sorted(per):
        s = per[code]
        for k in tot:
            tot[k] += s[k]
        print(f"{code:6} {s['tp']:4} {s['fp']:4} {s['fn']:4} {pct(s['tp'], s['tp'] + s['fp']):>10} "
              f"{pct(s['tp'], s['tp'] + s['fn']):>8}")  # fmt: skip
    print(f"{'all':6} {tot['tp']:4} {tot['fp']:4} {tot['fn']:4} {pct(tot['tp'], tot['tp'] + tot['fp']):>10} "
          f"{pct(tot['tp'], tot['tp'] + tot['fn']):>8}")  # fmt: skip
    if args.show:
        print("\n".join(fps + fns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
