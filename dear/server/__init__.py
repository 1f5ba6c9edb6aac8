"""The warm server: a `dear` command without the ~5 s of imports.

Every job of a study is a fresh `dear` process, and each one used to import
torch, torchvision and open_clip before doing anything. A warm server is a
process that has imported those libraries once (and none of `dear`'s own
modules); each `dear` command connects to it and runs in a child forked from
it, with the command's own argv, working folder, environment and standard
streams. Nothing the command computes or writes changes: the child imports
`dear` (and any plugin) fresh from disk, exactly as a new process would.

- `wire`: what the command and the server agree on (which server fits a
  command, where it listens, how a request and its answer travel, what
  `dear server status|stop` asks: `control`). Standard library only: the
  `dear` command reads it before anything else, and `dear.cli` imports
  nothing else of the server, which imports `dear.cli` (no circle).
- `client`: the `dear` command itself: connects (starting a server on first
  use), forwards its signals, exits as the command did; without a server
  (switched off, unusable, failed) it runs the command in its own process.
- `daemon`: the server: imports, listens, forks one child per command, ends
  when idle.

docs/performance.md ("A job's fixed cost") has the measurements and the design
choices; `DEAR_SERVER=off` runs every command without it.
"""
