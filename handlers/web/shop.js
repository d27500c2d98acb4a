// The stockguard shop: list the items, buy one unit with an Idempotency-Key.
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const price = (cents) => (cents / 100).toLocaleString(undefined, { style: 'currency', currency: 'EUR' });

// A random key per click: a retry of the same click would reuse it (replayed, not sold twice).
function idempotencyKey() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return 'shop-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

async function load() {
  const res = await fetch('/api/items');
  const items = await res.json();
  $('items').innerHTML = items.map((it) => `<li>
      <h2>${esc(it.name)}</h2>
      <p>${price(it.price_cents)} · ${it.stock > 0 ? `${it.stock} in stock` : '<span class="bad">sold out</span>'}</p>
      <button type="button" data-id="${it.id}" ${it.stock > 0 ? '' : 'disabled'}>Buy one</button></li>`).join('');
}

async function buy(id, button) {
  button.disabled = true;
  try {
    const res = await fetch(`/api/items/${id}/purchase`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': idempotencyKey() },
      body: JSON.stringify({ quantity: 1 }),
    });
    const body = await res.json();
    $('status').textContent = res.ok
      ? `Order ${body.order_id} placed: ${body.remaining} left.`
      : `Not bought: ${body.error.message}`;
  } catch (err) {
    $('status').textContent = `Not bought: ${err.message}`;
  }
  await load();
}

$('items').addEventListener('click', (e) => {
  const b = e.target.closest('button[data-id]');
  if (b) buy(b.dataset.id, b);
});
load().catch((err) => { $('status').textContent = `Could not load the items: ${err.message}`; });
