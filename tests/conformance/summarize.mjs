// Reads the checks.json the conformance suite wrote for each scenario (run.sh passes
// `-o RESULTS/<scenario>`, the suite writes RESULTS/<scenario>/server-<scenario>-<time>/checks.json)
// and prints a compact verdict. Exit 1 when a required check failed or a scenario left no
// results.
//
// usage: node summarize.mjs RESULTS_DIR SCENARIO...
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

// Every FAILURE counts: the caching scenario's prompts and resources checks too, run against
// a worker fronting an upstream with prompts and resources on (interop.rs starts one).

const MAX_MESSAGE = 1500;

const [resultsDir, ...scenarios] = process.argv.slice(2);
if (!resultsDir || scenarios.length === 0) {
  console.error("usage: summarize.mjs RESULTS_DIR SCENARIO...");
  process.exit(2);
}

function oneLine(text, max = MAX_MESSAGE) {
  const s = String(text ?? "").replace(/\s*\n\s*/g, " | ");
  return s.length > max ? `${s.slice(0, max)}… [${s.length - max} more chars in checks.json]` : s;
}

function findChecks(scenario) {
  const dir = join(resultsDir, scenario);
  if (!existsSync(dir)) return null;
  const runs = readdirSync(dir).filter((d) => existsSync(join(dir, d, "checks.json"))).sort();
  if (runs.length === 0) return null;
  return join(dir, runs[runs.length - 1], "checks.json");
}

function logTail(scenario) {
  const log = join(resultsDir, `${scenario}.log`);
  const rc = join(resultsDir, `${scenario}.rc`);
  const code = existsSync(rc) ? readFileSync(rc, "utf8").trim() : "?";
  const lines = existsSync(log) ? readFileSync(log, "utf8").trim().split("\n").slice(-5) : [];
  return `suite exit ${code}; log tail: ${oneLine(lines.join("\n"), 600)}`;
}

let totalPassed = 0;
let totalFailed = 0;
const rows = [];
const details = [];

for (const scenario of scenarios) {
  const file = findChecks(scenario);
  let checks;
  try {
    checks = file ? JSON.parse(readFileSync(file, "utf8")) : null;
  } catch (e) {
    checks = null;
  }
  if (!Array.isArray(checks) || checks.length === 0) {
    totalFailed += 1;
    rows.push({ scenario, text: "NO RESULTS" });
    details.push(`  FAIL  ${scenario}: no checks recorded (${logTail(scenario)})`);
    continue;
  }
  const count = (status) => checks.filter((c) => c.status === status).length;
  const failures = checks.filter((c) => c.status === "FAILURE");
  const passed = count("SUCCESS");
  totalPassed += passed;
  totalFailed += failures.length;
  rows.push({
    scenario,
    text:
      `${passed} passed, ${failures.length} failed, ${count("SKIPPED")} skipped, ` +
      `${count("WARNING")} warnings`,
    bad: failures.length > 0,
  });
  const label = (c) => `${scenario} ${c.id}${c.name && c.name !== c.id ? ` (${c.name})` : ""}`;
  for (const c of failures) details.push(`  FAIL  ${label(c)}: ${oneLine(c.errorMessage ?? c.description)}`);
  for (const c of checks.filter((c) => c.status === "WARNING"))
    details.push(`  warn  ${label(c)}: ${oneLine(c.errorMessage ?? c.description, 300)}`);
}

const width = Math.max(...rows.map((r) => r.scenario.length));
console.log("");
for (const r of rows) console.log(`${r.bad || r.text === "NO RESULTS" ? "✗" : "✓"} ${r.scenario.padEnd(width)}  ${r.text}`);
if (details.length) {
  console.log("");
  for (const d of details) console.log(d);
}
console.log("");
console.log(`${totalPassed} passed, ${totalFailed} failed`);
process.exit(totalFailed > 0 ? 1 : 0);
