// Render one of runner's HTML pages in headless Chromium and print what a reader would see, as
// JSON: in light mode (with a screenshot, after a row was opened), in dark mode, and with script turned off. Every
// request the page makes besides its own document is recorded: a self-contained page makes none.
//
//   node render.mjs PAGE.html [SCREENSHOT.png]
//
// CHROMIUM names the browser (default /usr/bin/chromium).
import { chromium } from 'playwright-core';
import { pathToFileURL } from 'node:url';

const [file, shot] = process.argv.slice(2);
const url = pathToFileURL(file).href;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});

const look = () => {
  const visible = (el) => !!el && el.offsetParent !== null && !el.hidden;
  const svg = document.querySelector('svg.timeline');
  const filters = document.getElementById('filters');
  return {
    title: document.title,
    lanes: document.querySelectorAll('svg.timeline .lane-row').length,
    laneLabels: [...document.querySelectorAll('svg.timeline .lane-row text')].map((t) => t.textContent),
    bars: document.querySelectorAll('svg.timeline g.attempt').length,
    backoffs: document.querySelectorAll('svg.timeline rect.backoff').length,
    gateSegments: document.querySelectorAll('svg.timeline rect.gate').length,
    timelineWidth: svg ? Math.round(svg.getBoundingClientRect().width) : 0,
    items: document.querySelectorAll('details.item').length,
    visibleItems: [...document.querySelectorAll('details.item')].filter(visible).length,
    filtersShown: visible(filters),
    runRows: document.querySelectorAll('table.runs tr').length,
    flaky: document.querySelectorAll('.flaky').length,
    trend: !!document.querySelector('svg.trend'),
    background: getComputedStyle(document.body).backgroundColor,
    scrollsSideways: document.documentElement.scrollWidth > window.innerWidth + 1,
    // Labels of the charts drawn past their chart's edge (cut off).
    labelsCut: [...document.querySelectorAll('svg text')].filter((t) => {
      const box = t.getBoundingClientRect();
      const chart = t.ownerSVGElement.getBoundingClientRect();
      return box.width > 0 && (box.left < chart.left - 0.5 || box.right > chart.right + 0.5
        || box.top < chart.top - 0.5 || box.bottom > chart.bottom + 0.5);
    }).map((t) => t.textContent),
    trendLabels: [...document.querySelectorAll('svg.trend text')].map((t) => t.textContent),
    // Text shown with the backticks of runner's messages left in (they are shown as code),
    // output tails (preformatted) aside.
    backticks: (() => {
      const out = [];
      const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
      for (let n = walk.nextNode(); n; n = walk.nextNode()) {
        if (n.textContent.includes('`') && !n.parentElement.closest('pre, title, script, style')) {
          out.push(n.textContent);
        }
      }
      return out;
    })(),
    heading: document.querySelector('h1') ? document.querySelector('h1').textContent : '',
  };
};

const facts = {};
for (const [mode, options] of [
  ['light', { colorScheme: 'light' }],
  ['dark', { colorScheme: 'dark' }],
  ['noscript', { javaScriptEnabled: false }],
]) {
  const context = await browser.newContext({ viewport: { width: 1366, height: 768 }, ...options });
  const page = await context.newPage();
  const requests = [];
  const errors = [];
  page.on('request', (r) => { if (r.url() !== url) requests.push(r.url()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(url, { waitUntil: 'load' });
  const seen = await page.evaluate(look);
  if (mode === 'light' && seen.filtersShown) {
    // The filters: only halted items, then every item again.
    const halted = await page.locator('details.item[data-outcome="halted"]').count();
    await page.selectOption('#f-outcome', 'halted');
    seen.filteredHalted = { expected: halted, shown: await page.evaluate(look).then((l) => l.visibleItems) };
    await page.selectOption('#f-outcome', '');
    // A click on an attempt's bar opens its item's row.
    const bar = page.locator('svg.timeline a').first();
    const target = (await bar.getAttribute('data-item')) || '';
    await bar.click();
    seen.clickedOpens = await page.evaluate((id) => document.getElementById(id).open, target);
  }
  if (shot && mode === 'light') {
    await page.screenshot({ path: shot, fullPage: true });
  }
  seen.requests = requests;
  seen.errors = errors;
  facts[mode] = seen;
  await context.close();
}
await browser.close();
console.log(JSON.stringify(facts));
