// Scenario 6: a schedule created through the SDK; this process also runs what it fires.
// Serves until SIGTERM, then deletes the schedule through the SDK.
import { Resonate } from "@resonatehq/sdk";
import { config, emit, record, settings, untilTerminated } from "./tsshared.mjs";

const cfg = config();

function tick(ctx, label) {
  record(cfg.ledger, `${ctx.id} ${label}`);
  return `${label} at ${ctx.id}`;
}

const resonate = new Resonate(settings(cfg));
resonate.register("tick", tick);
const schedule = await resonate.schedule(
  cfg.id,
  cfg.cron,
  "tick",
  cfg.label,
  resonate.options({ target: cfg.group, timeout: 5 * 60 * 1000 }),
);
await untilTerminated();
await schedule.delete();
emit({ deleted: cfg.id });
await resonate.stop();
