"""Git for the loop: each proposal on its own branch, in its own worktree, away from the user.

The user's working tree, index and current branch are never touched: proposals are committed in
worktrees under `<state_dir>/worktrees/`, which is git-ignored from inside (`<state_dir>/.gitignore`
holds `*`), so `git status` in the user's checkout does not change either. Only `review --merge`
and `nightly --merge` write to the user's branch, and only when asked.
"""

from __future__ import annotations

import logging
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from optimizer.errors import HarnessError, InputError

AUTHOR_NAME = "prompt-optimizer"
AUTHOR_EMAIL = "prompt-optimizer@localhost"


def _git():
    import git

    return git


def open_repo(project_root: Path):
    git = _git()
    try:
        repo = git.Repo(project_root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise InputError("the project is not inside a git repository", path=project_root,
                         fix="run `git init` and commit the prompt files; the loop works on git branches") from None
    if repo.bare:
        raise InputError("the repository is bare", path=project_root, fix="run from a checkout with a working tree")
    return repo


@dataclass(frozen=True)
class Base:
    ref: str
    """Branch name (or the commit sha when HEAD is detached)."""
    commit: str


def resolve_base(repo, ref: str | None = None) -> Base:
    git = _git()
    try:
        if ref:
            commit = repo.commit(ref)
            name = ref
        else:
            commit = repo.head.commit
            name = repo.active_branch.name if not repo.head.is_detached else commit.hexsha
    except (ValueError, git.BadName, git.GitCommandError):
        raise InputError(f"cannot resolve the base {ref or 'HEAD'!r}", field="--base",
                         fix="commit something first, or pass an existing branch or commit") from None
    return Base(ref=name, commit=commit.hexsha)


def relative(repo, path: Path) -> str:
    return Path(path).resolve().relative_to(Path(repo.working_tree_dir).resolve()).as_posix()


def require_files(repo, base: Base, paths: list[str]) -> None:
    """Refuse to start when the base commit does not contain the prompt files."""
    tree = repo.commit(base.commit).tree
    missing = []
    for path in paths:
        try:
            tree / path
        except KeyError:
            missing.append(path)
    if missing:
        raise InputError(f"the base commit {base.commit[:12]} does not contain {', '.join(missing)}",
                         path=missing[0], fix="commit the prompt file(s) first: the loop patches committed files only")


def read_at(repo, commit: str, path: str) -> str:
    return (repo.commit(commit).tree / path).data_stream.read().decode("utf-8")


def uncommitted(repo, path: str) -> bool:
    """True when the working-tree copy of `path` differs from the checked-out commit's (HEAD)."""
    local = Path(repo.working_tree_dir) / path
    try:
        committed = read_at(repo, repo.head.commit.hexsha, path)
    except (KeyError, ValueError):  # not in HEAD (or no commit yet): the local file is all there is
        return local.is_file()
    return not local.is_file() or local.read_text(encoding="utf-8") != committed


def ignore_state_dir(state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    marker = state_dir / ".gitignore"
    if not marker.exists():
        marker.write_text("*\n", encoding="utf-8")


@contextmanager
def worktree(repo, *, branch: str, base_commit: str, parent: Path) -> Iterator[Path]:
    """A new branch from the base, checked out in a fresh worktree; the worktree is always removed.

    The branch stays; `delete_branch` removes it when the proposal is rejected.
    """
    git = _git()
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / branch.replace("/", "__")
    if path.exists():
        _remove_worktree(repo, path)
    try:
        repo.git.worktree("add", "--quiet", "-b", branch, str(path), base_commit)
    except git.GitCommandError as exc:
        raise HarnessError(f"could not create worktree for {branch}: {exc.stderr.strip()}",
                           fix="delete the branch if it is left over from an earlier run: git branch -D " + branch)
    try:
        yield path
    finally:
        _remove_worktree(repo, path)


def _remove_worktree(repo, path: Path) -> None:
    git = _git()
    try:
        repo.git.worktree("remove", "--force", str(path))
    except git.GitCommandError:
        shutil.rmtree(path, ignore_errors=True)
    try:
        repo.git.worktree("prune")
    except git.GitCommandError:
        pass


def changed_files(workdir: Path) -> list[str]:
    """Paths changed in a worktree relative to its HEAD, untracked files included."""
    git = _git()
    tree = git.Repo(workdir)
    lines = tree.git.status("--porcelain", "--untracked-files=all").splitlines()
    return sorted({line[3:].split(" -> ")[-1].strip('"') for line in lines if line.strip()})


def diff_of(workdir: Path, paths: list[str] | None = None) -> str:
    git = _git()
    tree = git.Repo(workdir)
    return tree.git.diff("HEAD", "--", *(paths or []))


def commit_all(workdir: Path, paths: list[str], message: str) -> str:
    git = _git()
    tree = git.Repo(workdir)
    tree.index.add(paths)
    actor = git.Actor(AUTHOR_NAME, AUTHOR_EMAIL)
    return tree.index.commit(message, author=actor, committer=actor).hexsha


def amend_message(workdir: Path, message: str) -> str:
    git = _git()
    tree = git.Repo(workdir)
    tree.git.commit("--amend", "--quiet", "--allow-empty", "-m", message,
                    env={"GIT_AUTHOR_NAME": AUTHOR_NAME, "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
                         "GIT_COMMITTER_NAME": AUTHOR_NAME, "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL})
    return tree.head.commit.hexsha


def delete_branch(repo, branch: str) -> None:
    """Delete `branch` if it exists; a branch that cannot be deleted is left with a warning."""
    git = _git()
    if not branch_exists(repo, branch):
        return
    try:
        repo.git.branch("-D", branch)
    except git.GitCommandError as exc:
        logging.getLogger("optimizer").warning("could not delete branch %s: %s", branch,
                                               (exc.stderr or str(exc)).strip())


def branch_exists(repo, branch: str) -> bool:
    return any(head.name == branch for head in repo.heads)


def remove_stray_worktrees(repo, parent: Path) -> list[str]:
    """Remove every worktree under `parent` (left by a killed job), prune git's records of them,
    and clear ref locks a killed git left under `refs/heads/optimizer/`."""
    removed = []
    if parent.is_dir():
        for path in sorted(parent.iterdir()):
            _remove_worktree(repo, path)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    git = _git()
    try:
        repo.git.worktree("prune")
    except git.GitCommandError:
        pass
    for lock in (Path(repo.git_dir) / "refs" / "heads" / "optimizer").rglob("*.lock"):
        lock.unlink(missing_ok=True)
    return removed


def delete_branches(repo, prefix: str) -> list[str]:
    """Delete every branch whose name starts with `prefix`; returns their names."""
    names = [head.name for head in repo.heads if head.name.startswith(prefix)]
    for name in names:
        delete_branch(repo, name)
    return names


def require_checked_out(repo, branch: str) -> None:
    """`--merge` writes to the user's branch, so that branch must be the one checked out."""
    if repo.head.is_detached or repo.active_branch.name != branch:
        current = "a detached HEAD" if repo.head.is_detached else repr(repo.active_branch.name)
        raise InputError(f"--merge merges into {branch!r}, but the checkout is on {current}", field="--merge",
                         fix=f"git switch {branch} first")


def merge_branch(repo, branch: str, message: str, *, fix: str) -> None:
    """Merge `branch` into the checked-out branch (always a merge commit); on a conflict the merge
    is aborted, so the checkout is left as it was, and the error names `fix`."""
    git = _git()
    try:
        repo.git.merge("--no-ff", "--no-edit", "-m", message, branch)
    except git.GitCommandError as exc:
        try:
            repo.git.merge("--abort")
        except git.GitCommandError:
            pass
        raise InputError(f"git could not merge {branch}: {exc.stderr.strip()[:300]}", field="--merge",
                         fix=fix) from None
