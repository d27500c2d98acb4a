// The stockguard shop: list the items, buy one unit with an Idempotency-Key.
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const price = (cents) => (cents / 100).toLocaleString(undefined, { style: 'currency', currency: 'EUR' });
const names = new Map(); // item id -> name, for messages that would otherwise show an id

// A random key per click: a retry of the same click would reuse it (replayed, not sold twice).
function idempotencyKey() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return 'shop-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

function say(text) { $('status').textContent = text; }

// unreachable words a failed fetch (the server stopped, the network gone) for a buyer.
const unreachable = 'the shop cannot be reached (is the server running?). Nothing was charged; try again in a moment.';

async function load() {
  const res = await fetch('/api/items');
  if (!res.ok) throw new Error(`the catalogue answered ${res.status}`);
  const items = await res.json();
  names.clear();
  items.forEach((it) => names.set(String(it.id), it.name));
  $('items').innerHTML = items.map((it) => `<li>
      <h2 id="name-${it.id}">${esc(it.name)}</h2>
      <p>${price(it.price_cents)} · ${it.stock > 0 ? `${it.stock} in stock` : '<span class="bad">sold out</span>'}</p>
      <button type="button" data-id="${it.id}" aria-describedby="name-${it.id}" ${it.stock > 0 ? '' : 'disabled'}>Buy one</button></li>`).join('');
}

// refusal words an error answer for a buyer, naming the item rather than its id.
function refusal(id, body) {
  const name = names.get(String(id)) || 'this item';
  switch (body?.error?.code) {
    case 'sold_out': return `${name} is sold out.`;
    case 'insufficient_stock': return `not enough ${name} left.`;
    case undefined: return 'the shop gave an answer it could not read; try again.';
    default: return body.error.message;
  }
}

async function buy(id, button) {
  button.disabled = true;
  let message;
  try {
    const res = await fetch(`/api/items/${id}/purchase`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': idempotencyKey() },
      body: JSON.stringify({ quantity: 1 }),
    });
    const body = await res.json().catch(() => null);
    message = res.ok ? `Order ${body.order_id} placed: ${body.remaining} left.` : `Not bought: ${refusal(id, body)}`;
  } catch {
    message = `Not bought: ${unreachable}`;
  }
  try {
    await load();
  } catch {
    button.disabled = false; // the list could not be redrawn: the old button stays usable
    say(message);
    button.focus();
    return;
  }
  say(message);
  // The list was redrawn: keep a keyboard buyer where they were.
  const again = $('items').querySelector(`button[data-id="${id}"]`);
  if (again && !again.disabled) again.focus();
  else $('status').focus();
}

$('items').addEventListener('click', (e) => {
  const b = e.target.closest('button[data-id]');
  if (b) buy(b.dataset.id, b);
});
load().catch((err) => say(`Could not load the items: ${err instanceof TypeError ? unreachable : err.message}`));
