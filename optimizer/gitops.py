"""Git for the loop: each proposal on its own branch, made away from the user.

The user's working tree, index and current branch are never touched: proposals are made in a
clone of their own under `<state_dir>/boxes/` (`optimizer.proposal.box`), which is git-ignored from inside
(`<state_dir>/.gitignore` holds `*`), so `git status` in the user's checkout does not change
either. Only `review --merge` and `nightly --merge` write to the user's branch, and only when asked.

A proposal is the clone's final content against the base commit (`final_change`), not what
`git status` says inside it: a proposer that commits its own edits (as aider does) hides nothing
that way. Its branch gets one commit of ours on the base holding exactly that change
(`commit_change`); the proposer's own commits do not survive on it.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from optimizer.errors import HarnessError, InputError, first_line

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


def resolve_base(repo, ref: str | None = None, *, field: str = "--base") -> Base:
    """`ref` (default: the checked-out branch, or HEAD's commit when detached) and its commit;
    one that does not resolve is an input error on `field`."""
    git = _git()
    try:
        if ref:
            commit = repo.commit(ref)
            name = ref
        else:
            commit = repo.head.commit
            name = repo.active_branch.name if not repo.head.is_detached else commit.hexsha
    except (ValueError, git.BadName, git.GitCommandError):
        raise InputError(f"cannot resolve the {field.lstrip('-')} {ref or 'HEAD'!r}", field=field,
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
    """The text of the prompt file `path` at `commit`; one that is not UTF-8 is an input error."""
    data = (repo.commit(commit).tree / path).data_stream.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text at commit {commit[:12]} ({exc.reason} at byte {exc.start})", path=path,
                         fix="save the file as UTF-8 and commit it") from None


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


class WorktreeError(HarnessError):
    """A proposal's work tree (the box's clone) that git cannot read (a file it may not open, the folder gone): the
    proposal is rejected, the iteration goes on."""


@dataclass(frozen=True)
class Change:
    """A proposer's work as the loop judges and commits it: its work tree's final content against
    the base commit, whatever the proposer committed, staged, left untracked or deleted. Its own
    commits, index and branch play no part."""

    tree: str
    """The git tree of the work tree's final content."""
    files: list[str]
    """Paths that differ from the base commit (a rename is a deletion and an addition)."""
    diff: str


def final_change(repo, workdir: Path, base_commit: str) -> Change:
    """Stage everything in `workdir` into a throw-away index of `repo` that starts from
    `base_commit` and compare the resulting tree with `base_commit`. `workdir`'s own `.git` (the
    box's, which the proposer may have rewritten) is never read: its config, hooks, index and
    commits play no part, and the new blobs land in `repo`, ready for `commit_change`. A new
    file that git ignores is not part of it; a tracked file is, ignored or not."""
    git = _git()
    if not Path(workdir).is_dir():
        raise WorktreeError(f"the proposal's work tree {workdir} is gone")
    with tempfile.TemporaryDirectory(prefix="optimizer-index-") as folder:
        env = {"GIT_DIR": str(Path(repo.git_dir).resolve()), "GIT_WORK_TREE": str(Path(workdir).resolve()),
               "GIT_INDEX_FILE": str(Path(folder) / "index")}
        staging = git.Git(str(workdir))
        try:
            staging.read_tree(base_commit, env=env)
            staging.add("--all", env=env)
            tree = staging.write_tree(env=env)
        except git.CommandError as exc:
            detail = first_line(str(getattr(exc, "stderr", "") or exc)).removeprefix("stderr: ").strip(" '")
            raise WorktreeError(f"git cannot read the proposal's work tree: {detail}") from None
    names = _diff(repo, "--name-only", "-z", base_commit, tree)
    return Change(tree=tree, files=sorted(name for name in names.split("\0") if name),
                  diff=_diff(repo, base_commit, tree).rstrip("\n"))


def _diff(repo, *args: str) -> str:
    """`git diff` as text whatever the bytes (a proposer may write any): what is not UTF-8 becomes
    U+FFFD, so the diff can be stored and shown, and such a path never passes for the prompt's."""
    data = repo.git.diff("--no-color", "--no-ext-diff", "--no-renames", *args, stdout_as_string=False)
    return data.decode("utf-8", errors="replace")


WATCH_REVERT = "(optimizer watch)"
"""The mark in the subject of a commit by which the nightly's watch reverted a patch shown harmful."""


def reverted_lines(repo, commit: str, path: str) -> frozenset[str]:
    """The lines of `path` that the watch's revert commits reachable from `commit` took out
    (stripped, blank ones left out; a line a revert removed and wrote again, its end of line
    changed, was not taken out): a patch shown harmful must not come back in a later one."""
    from optimizer.proposal.diffs import net_changed_lines

    found = repo.git.log("--format=%H", "--fixed-strings", f"--grep={WATCH_REVERT}", commit, "--", path)
    lines: set[str] = set()
    for sha in found.split():
        lines.update(net_changed_lines(repo.git.show("--format=", sha, "--", path))[1])
    return frozenset(lines)


def file_at(repo, tree: str, path: str) -> bytes | None:
    """The content of the regular file at `path` in `tree`; None when there is none (deleted, or a
    link, folder or submodule in its place)."""
    git = _git()
    try:
        item = git.Tree(repo, bytes.fromhex(tree), path="") / path
    except KeyError:
        return None
    if item.type != "blob" or item.mode & 0o170000 != 0o100000:
        return None
    return item.data_stream.read()


def tree_with(repo, commit: str, path: str, text: str) -> str:
    """The tree of `commit` with the file at `path` holding `text` (its mode kept), written into
    `repo` through a throw-away index: no work tree or checkout is touched."""
    mode = repo.git.ls_tree(commit, "--", path).split(" ", 1)[0] or "100644"
    with tempfile.TemporaryDirectory(prefix="optimizer-index-") as folder:
        content = Path(folder) / "content"
        content.write_bytes(text.encode("utf-8"))
        blob = repo.git.hash_object("-w", "--no-filters", str(content))
        env = {"GIT_INDEX_FILE": str(Path(folder) / "index")}
        repo.git.read_tree(commit, env=env)
        repo.git.update_index("--cacheinfo", f"{mode},{blob},{path}", env=env)
        return repo.git.write_tree(env=env)


def commit_change(repo, branch: str, base_commit: str, tree: str, message: str) -> str:
    """Point `branch` at one new commit of `tree` on top of `base_commit`, whatever the branch held
    before (a proposer's own commits, or this commit with an earlier message)."""
    env = {"GIT_AUTHOR_NAME": AUTHOR_NAME, "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
           "GIT_COMMITTER_NAME": AUTHOR_NAME, "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL}
    commit = repo.git.commit_tree(tree, "-p", base_commit, "-m", message, env=env)
    repo.git.update_ref(f"refs/heads/{branch}", commit)
    return commit


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


def branch_taken(repo, branch: str) -> bool:
    """A local branch of that name, or a remote-tracking one (`origin/<branch>`) of any remote."""
    return branch_exists(repo, branch) or any(ref.remote_head == branch for remote in repo.remotes
                                              for ref in remote.refs)


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
        said = " ".join(part.strip() for part in (exc.stderr, exc.stdout) if isinstance(part, str) and part.strip())
        if "CONFLICT" in said:
            fix = (f"the checked-out branch changed the same lines since the proposal was made: run the iteration "
                   f"again on it, or merge by hand (git merge {branch})")
        raise InputError(f"git could not merge {branch}: {said[:300] or 'no reason given'}", field="--merge",
                         fix=fix) from None
