/**
 * "Something changed in this process": the in-process notice that lets the
 * live feeds push a change made here at once instead of at their next poll.
 * Every mutation raises it once it has run ({@link useChangeSignalAfterMutations}),
 * and the co-hosted runner after a tick that advanced a run and after each
 * batch it advanced in flight. A round's write that parked cues raises a
 * signal of its own that wakes the cue inbox alone (src/server.ts): the owners
 * should not wait for the rest of the batch, and the runs themselves change
 * for `runChanges` when they are released, told as before. Changes made by other
 * instances are not signalled; the feeds find them at their next poll.
 */
import { getOperationAST, OperationTypeNode } from 'graphql'
import type { Plugin } from 'graphql-yoga'

export class ChangeSignal {
  private readonly handlers = new Set<() => void>()

  /** Call `handler` on each notice; answers the function that stops it. */
  on(handler: () => void): () => void {
    this.handlers.add(handler)
    return () => this.handlers.delete(handler)
  }

  /** Tell every handler (each only schedules a poll; none throws). */
  notify(): void {
    for (const handler of this.handlers) handler()
  }
}

/**
 * A yoga plugin: after every mutation (over HTTP or WebSocket, applied or not),
 * tell `signal`. Hooked here rather than in each control, so every mutation,
 * present or future, wakes the live feeds; one that changed nothing costs one
 * early poll.
 */
export function useChangeSignalAfterMutations(signal: ChangeSignal): Plugin {
  return {
    onExecute({ args }) {
      const operation = getOperationAST(args.document, args.operationName)
      if (operation?.operation !== OperationTypeNode.MUTATION) return
      return { onExecuteDone: () => signal.notify() }
    },
  }
}
