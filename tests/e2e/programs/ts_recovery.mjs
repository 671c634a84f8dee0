// Scenario 7: a workflow of fenced ctx.run steps whose worker is SIGKILLed mid-way.
// Each step appends `<step> <token>` to the ledger before returning the token. Step `hold` waits
// until the gate file exists, appending a line to the `holding` file every 200 ms meanwhile: the
// first worker never sees the gate and is killed there.
// role "first" dispatches the workflow to its own group (so it is claimed through `execute` and
// heartbeated) and waits for it; role "second" is a worker of the same group.
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { Resonate } from "@resonatehq/sdk";
import { config, emit, pause, record, settings, untilTerminated } from "./tsshared.mjs";

const cfg = config();

async function step(ctx, i, hold) {
  const token = `${process.pid}-${randomUUID().slice(0, 8)}`;
  record(cfg.ledger, `${i} ${token}`);
  while (i === hold && !existsSync(cfg.gate)) {
    record(cfg.holding, token);
    await pause(200);
  }
  return token;
}

function* pipeline(ctx, steps, hold) {
  const tokens = [];
  for (let i = 0; i < steps; i++) tokens.push(yield* ctx.run(step, i, hold));
  return tokens;
}

const resonate = new Resonate(settings(cfg));
resonate.register("pipeline", pipeline);
if (cfg.role === "first") {
  const handle = await resonate.beginRpc(
    cfg.id,
    "pipeline",
    cfg.steps,
    cfg.hold,
    resonate.options({ target: cfg.group }),
  );
  emit(await handle.result());
} else {
  await untilTerminated();
}
await resonate.stop();
