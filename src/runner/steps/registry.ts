/**
 * Step kinds by name. The runner, the program validator and rehearsals look
 * kinds up here; custom kinds register from code beside the built-ins.
 */
import { cueStep } from './cue.ts'
import { logStep } from './log.ts'
import type { StepKind } from './types.ts'
import { waitStep } from './wait.ts'
import { webhookStep } from './webhook.ts'

/** `namespace.name`, e.g. `core.webhook` or `acme.lights`. */
const KIND_NAME = /^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)+$/

// biome-ignore lint/suspicious/noExplicitAny: each kind has its own params type; the registry only routes
export type AnyStepKind = StepKind<any>

export class StepRegistry {
  readonly #kinds = new Map<string, AnyStepKind>()

  /** Add a kind. A second kind with the same name is a programming error and throws. */
  register(kind: AnyStepKind): void {
    if (typeof kind?.kind !== 'string' || !KIND_NAME.test(kind.kind)) {
      throw new TypeError(
        `Step kind name ${JSON.stringify(kind?.kind)} must look like "namespace.name" (lowercase, e.g. "acme.lights").`,
      )
    }
    if (typeof kind.validate !== 'function' || typeof kind.execute !== 'function') {
      throw new TypeError(`Step kind ${kind.kind} must implement validate() and execute().`)
    }
    if (typeof kind.sideEffects !== 'boolean') {
      throw new TypeError(`Step kind ${kind.kind} must declare sideEffects (true or false).`)
    }
    if (kind.pure === true && (kind.sideEffects || kind.inline !== true)) {
      throw new TypeError(
        `Step kind ${kind.kind} cannot be pure: a pure kind is inline and has no side effects.`,
      )
    }
    if (this.#kinds.has(kind.kind)) throw new Error(`Step kind ${kind.kind} is already registered.`)
    this.#kinds.set(kind.kind, kind)
  }

  get(kind: string): AnyStepKind | undefined {
    return this.#kinds.get(kind)
  }

  /** Registered names, sorted. */
  kinds(): string[] {
    return [...this.#kinds.keys()].sort()
  }
}

/** A registry holding the built-ins: `core.log`, `core.wait`, `core.cue`, `core.webhook`. */
export function createDefaultRegistry(): StepRegistry {
  const registry = new StepRegistry()
  for (const kind of [logStep, waitStep, cueStep, webhookStep]) registry.register(kind)
  return registry
}
