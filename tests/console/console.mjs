// The operator's console in a real browser (issue 15 §6): Debian's chromium driven by
// playwright-core against a gateway started by the Rust test `console_works_in_a_real_browser`
// (tests/tests/e2e/console.rs), which passes:
//   CONSOLE_BASE   http://HOST:PORT of the gateway (MCPT_CONSOLE=on, tokens auth)
//   CONSOLE_TOKEN  a token of a principal in MCPT_CONSOLE_PRINCIPALS
//   OTHER_TOKEN    a valid token of a principal who is not
//   CHROMIUM       the browser binary (default /usr/bin/chromium)
//   SCREENSHOTS    where console-overview.png and console-task.png are written
// Every wait is for a condition in the page, with a deadline; none is a fixed sleep.
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import path from 'node:path';

const base = process.env.CONSOLE_BASE;
const token = process.env.CONSOLE_TOKEN;
const other = process.env.OTHER_TOKEN;
const shots = process.env.SCREENSHOTS ?? '.';
assert.ok(base && token && other, 'CONSOLE_BASE, CONSOLE_TOKEN and OTHER_TOKEN are needed');
const WAIT = { timeout: 20_000 };

/** Create a task over MCP (2026-07-28, Tasks extension declared); its id. */
async function createTask() {
  const res = await fetch(`${base}/mcp`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': 'sleep',
      authorization: `Bearer ${token}`,
    },
    body: JSON.stringify({
      jsonrpc: '2.0', id: 1, method: 'tools/call',
      params: {
        name: 'sleep', arguments: { ms: 60000, steps: 1 },
        _meta: {
          'io.modelcontextprotocol/protocolVersion': '2026-07-28',
          'io.modelcontextprotocol/clientInfo': { name: 'console-browser-test', version: '0' },
          'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
        },
      },
    }),
  });
  const body = await res.json();
  const id = body?.result?.taskId;
  assert.ok(id, `not a task: ${JSON.stringify(body)}`);
  return id;
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--no-sandbox'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });

  // A principal not listed in MCPT_CONSOLE_PRINCIPALS is refused, and sees no console.
  await page.goto(`${base}/console/signin`);
  await page.getByLabel('Token or JWT').fill(other);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('Sign-in refused.').waitFor(WAIT);
  const refused = await page.goto(`${base}/console/`);
  assert.equal(refused.status(), 404, 'no console without a session');
  console.log('ok: sign-in refused for a non-console principal');

  // The console principal signs in and lands on the overview.
  await page.goto(`${base}/console/signin`);
  await page.getByLabel('Token or JWT').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor(WAIT);
  await page.getByRole('table', { name: 'Tools' }).getByText('sleep', { exact: true }).first().waitFor(WAIT);
  console.log('ok: signed in; overview shows the worker\'s tools');

  // The dead letters page, from the navigation: none, nothing has failed.
  await page.getByRole('link', { name: 'Dead letters' }).click();
  await page.getByRole('heading', { name: 'Dead letters' }).waitFor(WAIT);
  await page.getByText('No dead letters that match.').waitFor(WAIT);
  console.log('ok: the dead letters page, reached from the navigation, lists none');

  // The task list, open before the task exists: its id appears without a reload.
  await page.getByRole('link', { name: 'Tasks' }).click();
  await page.getByRole('heading', { name: 'Tasks' }).waitFor(WAIT);
  let reloads = 0;
  page.on('load', () => { reloads += 1; });
  const id = await createTask();
  const link = page.getByRole('link', { name: id });
  await link.waitFor(WAIT);
  assert.equal(reloads, 0, 'the page was not reloaded');
  console.log(`ok: ${id} appeared without a reload`);

  // The overview with a queue that holds the running task.
  await page.getByRole('link', { name: 'Overview' }).click();
  await page.getByRole('table', { name: 'Queues' }).getByText('default').waitFor(WAIT);
  const chart = page.getByRole('img', { name: /Jobs waiting and running/ });
  await chart.waitFor(WAIT);
  await page.waitForFunction(() => [...document.images].every((i) => i.complete && i.naturalWidth > 0), null, WAIT);
  await page.screenshot({ path: path.join(shots, 'console-overview.png'), fullPage: true });

  // Open it, press Cancel, see it end cancelled.
  await page.getByRole('link', { name: 'Tasks' }).click();
  await page.getByRole('link', { name: id }).click();
  await page.getByRole('heading', { name: `Task ${id}` }).waitFor(WAIT);
  await page.locator('[data-status="working"]').waitFor(WAIT);
  await page.getByRole('button', { name: 'Cancel' }).click();
  await page.locator('[data-status="cancelled"]').waitFor(WAIT);
  console.log(`ok: ${id} cancelled from its page`);
  await page.screenshot({ path: path.join(shots, 'console-task.png'), fullPage: true });
} finally {
  await browser.close();
}
console.log('console browser test passed');
