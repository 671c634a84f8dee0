// Scenario 5: two detached children, then a promise a human settles from outside (ctx.promise).
import { Resonate } from "@resonatehq/sdk";
import { config, emit, record, settings } from "./tsshared.mjs";

const cfg = config();

function audit(ctx, order, desk) {
  record(cfg.ledger, `${desk} ${order}`);
  return `${desk} audited ${order}`;
}

function ship(ctx, order, decision) {
  return `${order} shipped, approved by ${decision.by}`;
}

function* approval(ctx, order, group) {
  const audits = [];
  for (const desk of ["finance", "legal"]) {
    audits.push((yield* ctx.detached("audit", order, desk, ctx.options({ target: group }))).id);
  }
  const human = yield* ctx.promise();
  const decision = yield* human;
  if (!decision.approved) return { audits, outcome: "refused" };
  const outcome = yield* ctx.run(ship, order, decision);
  return { audits, outcome };
}

const resonate = new Resonate(settings(cfg));
resonate.register("audit", audit);
resonate.register("approval", approval);
const result = await resonate.run(cfg.id, "approval", cfg.order, cfg.group);
// Detached children are not awaited by the workflow; wait for them here so they finish.
result.audit_results = [];
for (const id of result.audits) result.audit_results.push(await (await resonate.get(id)).result());
emit(result);
await resonate.stop();
