// Scenario 2: ctx.sleep between steps (durable timers: the workflow suspends and resumes).
import { Resonate } from "@resonatehq/sdk";
import { config, emit, settings } from "./tsshared.mjs";

function announce(ctx, n) {
  return `T-${n}`;
}

function* countdown(ctx, start, pauseMs) {
  const said = [];
  for (let n = start; n > 0; n--) {
    said.push(yield* ctx.run(announce, n));
    if (n > 1) yield* ctx.sleep(pauseMs);
  }
  said.push("liftoff");
  return said;
}

const cfg = config();
const resonate = new Resonate(settings(cfg));
resonate.register("countdown", countdown);
emit(await resonate.run(cfg.id, "countdown", cfg.start, cfg.pause_ms));
await resonate.stop();
