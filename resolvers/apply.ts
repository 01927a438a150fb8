/** Shows as code: exportDefinitions (viewer) and applyDefinitions (admin). */
import { ApplyPlanRef } from '../schema/apply.ts'
import { builder } from '../schema/builder.ts'
import { requires } from '../src/api/authz.ts'
import { redactedHeaderProblems, redactProgram, seesLiterals } from '../src/api/redact.ts'
import { AppError, ERROR_CODES } from '../src/errors.ts'
import { applyDefinitions, exportDefinitions } from '../src/operations/apply.ts'
import { actorOf, definitionDeps } from './deps.ts'

builder.queryFields((t) => ({
  exportDefinitions: t.field({
    type: 'JSON',
    description:
      'The definitions as manifests, in the shape applyDefinitions takes: the slugs named (in that order), or every definition not archived. Literal webhook header values read as "[redacted]" unless the caller is an admin.',
    extensions: requires('viewer'),
    args: { slugs: t.arg.stringList() },
    resolve: async (_root, args, ctx) => {
      const manifests = await exportDefinitions(definitionDeps(ctx), args.slugs ?? null)
      if (seesLiterals(ctx)) return manifests
      return manifests.map((m) => ({ ...m, program: redactProgram(m.program) }))
    },
  }),
}))

builder.mutationFields((t) => ({
  applyDefinitions: t.field({
    type: ApplyPlanRef,
    description:
      'Make the definitions what the manifests say, matched by slug. Every manifest is validated first; one problem anywhere and nothing is written (BAD_USER_INPUT lists every problem with its path, also in extensions.problems). Each changed definition is changed in one transaction and audited once; a version is published only when the program changed. prune archives the definitions no manifest names (CONFLICT while one has a run in progress). dryRun answers the plan and writes nothing.',
    extensions: requires('admin'),
    args: {
      manifests: t.arg({ type: 'JSON', required: true }),
      dryRun: t.arg.boolean({ defaultValue: false }),
      prune: t.arg.boolean({ defaultValue: false }),
    },
    resolve: (_root, args, ctx) => {
      // Checked before the manifests themselves: applying a redacted export would overwrite real headers.
      const redacted = redactedHeaderProblems(args.manifests)
      if (redacted.length > 0)
        throw new AppError(
          ERROR_CODES.BAD_USER_INPUT,
          `Nothing was applied: ${redacted.map((p) => `${p.path}: ${p.message}`).join('; ')}`,
          { extensions: { problems: redacted } },
        )
      return applyDefinitions(
        definitionDeps(ctx),
        args.manifests,
        { dryRun: args.dryRun === true, prune: args.prune === true },
        actorOf(ctx),
      )
    },
  }),
}))
