/**
 * Preloaded into every server process a drill spawns (`node --import tsx
 * --import test/drills/orphanGuard.ts src/cli.ts serve`): when the test process
 * that started it is gone (a vitest worker killed mid-drill, say by the OOM
 * killer, runs no cleanup), the server stops itself, so no drill leaves a
 * server behind. It changes nothing else: the process is `npm start`'s.
 */
const parent = process.ppid
const watch = setInterval(() => {
  if (process.ppid === parent) return
  clearInterval(watch)
  // SIGTERM: the server's own graceful stop (claims released); exit anyway if that hangs.
  process.kill(process.pid, 'SIGTERM')
  setTimeout(() => process.exit(1), 15_000).unref()
}, 500)
watch.unref()
