// The stockguard shop: list the items, buy one unit with an Idempotency-Key, or fill a cart
// and check it out (every line or none) or hold it (a countdown by the server's clock, then
// confirm or cancel). Everything works from the keyboard; results are read out by the status
// line (aria-live) and focus goes where the next step is.
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const price = (cents) => (cents / 100).toLocaleString(undefined, { style: 'currency', currency: 'EUR' });
const names = new Map(); // item id -> name, for messages that would otherwise show an id
const nameOf = (id) => names.get(String(id)) || `item ${id}`;
const maxQuantity = 1000; // the server's most units of one item per order

const cart = new Map(); // item id (a string) -> quantity, in the order the lines were added
let hold = null; // the hold on show: {id, lines, deadline (performance.now() ms), timer, ended}
let busy = false; // a cart or hold request is on its way: its buttons wait
let short = new Map(); // item id -> units available, of the lines the last refusal named
// cartKey is the Idempotency-Key of the cart's checkout: kept while the answer is unknown (the
// shop unreachable, or busy), so that checking out the same cart again replays an order that
// went through instead of placing a second one; a new cart (any change) gets a new key.
let cartKey = null;
// holdKey is the Idempotency-Key of the cart's hold and the ttl it was sent with, kept as
// cartKey is: holding the same cart again after an unknown answer shows the hold that went
// through instead of setting the units aside twice. A new cart or another ttl gets a new key;
// it is never the checkout's key (one key names one order or one hold).
let holdKey = null;

// A random key per request: a retry of the same request reuses it (replayed, not sold twice).
function idempotencyKey() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return 'shop-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

function say(text) { $('status').textContent = text; }

// unreachable words a failed fetch (the server stopped, the network gone) for a buyer.
const unreachable = 'the shop cannot be reached (is the server running?). Nothing was charged; try again in a moment.';

// describe words order or hold lines: "2 × Anorak, 1 × Boots".
const describe = (lines) => lines.map((l) => `${l.quantity} × ${nameOf(l.item_id)}`).join(', ');

async function load() {
  const res = await fetch('/api/items');
  if (!res.ok) throw new Error(`the catalogue answered ${res.status}`);
  const items = await res.json();
  names.clear();
  items.forEach((it) => names.set(String(it.id), it.name));
  $('items').innerHTML = items.map((it) => {
    const sold = it.stock <= 0;
    return `<li>
      <h3 id="name-${it.id}">${esc(it.name)}</h3>
      <p>${price(it.price_cents)} · ${sold ? '<span class="bad">sold out</span>' : `${it.stock} in stock`}</p>
      <button type="button" data-id="${it.id}" aria-describedby="name-${it.id}" ${sold ? 'disabled' : ''}>Buy one</button>
      <div class="add">
        <label for="qty-${it.id}">Quantity</label>
        <input type="number" id="qty-${it.id}" aria-describedby="name-${it.id}" inputmode="numeric" min="1" max="${maxQuantity}" value="1" ${sold ? 'disabled' : ''}>
        <button type="button" data-add="${it.id}" aria-describedby="name-${it.id}" ${sold ? 'disabled' : ''}>Add to cart</button>
      </div></li>`;
  }).join('');
  renderCart(); // names may have changed
}

// reload redraws the list after a sale and puts the keyboard back on the control it was on,
// when that control is still there and usable. A list that cannot be redrawn stays as it was.
async function reload() {
  const was = document.activeElement;
  const sel = was?.closest('#items') && (was.dataset.id ? `[data-id="${was.dataset.id}"]`
    : was.dataset.add ? `[data-add="${was.dataset.add}"]` : was.id ? `#${CSS.escape(was.id)}` : null);
  try {
    await load();
  } catch {
    return false;
  }
  const again = sel && $('items').querySelector(sel);
  if (again && !again.disabled) again.focus();
  return true;
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

// ---- The cart ----

// addToCart adds the quantity of item id's field to the cart; focus goes back to stay, the
// control the buyer used (the Add button, or the field itself for Enter in the field).
function addToCart(id, stay) {
  const input = $(`qty-${id}`);
  const q = Number(input.value);
  const name = nameOf(id);
  if (!Number.isInteger(q) || q < 1 || q > maxQuantity) {
    say(`Not added: the quantity of ${name} must be a whole number from 1 to ${maxQuantity}.`);
    input.focus();
    return;
  }
  const total = (cart.get(id) || 0) + q;
  if (total > maxQuantity) {
    say(`Not added: an order takes at most ${maxQuantity} units of ${name}; the cart has ${cart.get(id)}.`);
    input.focus();
    return;
  }
  cart.set(id, total);
  short.delete(id);
  cartKey = holdKey = null;
  renderCart();
  say(`Added ${q} × ${name} to the cart (${total} in the cart, ${cart.size} ${cart.size === 1 ? 'line' : 'lines'}).`);
  stay.focus();
}

function removeLine(id) {
  const ids = [...cart.keys()];
  const at = ids.indexOf(id);
  cart.delete(id);
  short.delete(id);
  cartKey = holdKey = null;
  renderCart();
  say(`Removed ${nameOf(id)} from the cart.`);
  const rest = [...cart.keys()];
  const next = rest[at] ?? rest[at - 1];
  if (next) $('cart-lines').querySelector(`button[data-remove="${next}"]`).focus();
  else $('cart-heading').focus();
}

// renderCart draws the cart's lines, marking those the last refusal named short.
function renderCart() {
  const lines = [...cart];
  $('cart-empty').hidden = lines.length > 0;
  $('cart-lines').innerHTML = lines.map(([id, q]) => {
    const name = esc(nameOf(id));
    const note = short.has(id) ? ` <span class="bad">short: ${short.get(id)} available</span>` : '';
    return `<li data-line="${id}"${short.has(id) ? ' class="short"' : ''}><span>${q} × ${name}${note}</span>
      <button type="button" data-remove="${id}" aria-label="Remove ${name} from the cart">Remove</button></li>`;
  }).join('');
  const units = lines.reduce((n, [, q]) => n + q, 0);
  $('cart-link').textContent = lines.length === 0 ? 'Cart: empty'
    : `Cart: ${lines.length} ${lines.length === 1 ? 'line' : 'lines'}, ${units} ${units === 1 ? 'unit' : 'units'}`;
  $('checkout').disabled = busy || lines.length === 0;
  $('hold').disabled = busy || lines.length === 0 || (hold !== null && !hold.ended);
}

const cartBody = () => ({ lines: [...cart].map(([id, q]) => ({ item_id: Number(id), quantity: q })) });
// routeItem is the cart's routing key, its lowest item id: the item its hold waits at when no
// other is being sold. deploy/nginx.conf hashes X-Route-Item as a purchase's item, so the cart
// reaches the replica that sells that item.
const routeItem = () => String(Math.min(...[...cart.keys()].map(Number)));

// call sends one JSON request and returns the answer and its body (null when there is none
// or it is not JSON). A failed fetch throws a TypeError.
async function call(method, url, payload, headers = {}) {
  const init = { method, headers: { ...headers } };
  if (payload !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(payload);
  }
  const res = await fetch(url, init);
  const body = res.status === 204 ? null : await res.json().catch(() => null);
  return { res, body };
}

// shortOf returns the short lines of a refused cart: item id -> units available.
function shortOf(body) {
  const lines = body?.error?.code === 'insufficient_stock' && Array.isArray(body.error.lines) ? body.error.lines : [];
  return new Map(lines.map((l) => [String(l.item_id), l.available]));
}

// cartRefusal words a refused cart or hold, naming every short line by its item's name.
function cartRefusal(body) {
  const err = body?.error;
  if (!err) return 'the shop gave an answer it could not read; try again.';
  const lines = err.code === 'insufficient_stock' && Array.isArray(err.lines) ? err.lines : [];
  if (lines.length > 0) {
    return 'not enough stock, so nothing was taken. ' +
      lines.map((l) => `${nameOf(l.item_id)}: ${l.requested} asked, ${l.available} available`).join('; ') + '.';
  }
  switch (err.code) {
    case 'at_capacity':
    case 'overloaded':
    case 'lock_timeout':
    case 'unavailable':
      return 'the shop is busy right now; nothing was taken. Try again in a moment.';
    default: return err.message;
  }
}

function setBusy(on) {
  busy = on;
  renderCart();
  for (const b of [$('confirm'), $('cancel')]) b.disabled = on;
}

function showOrder(order, title) {
  $('order-heading').textContent = `${title} ${order.order_id}`;
  $('order-lines').innerHTML = order.lines.map((l) => `<li>${l.quantity} × ${esc(nameOf(l.item_id))}</li>`).join('');
  $('order-box').hidden = false;
}

// finish ends a cart or hold request: the list is redrawn, the message said, and focus moved
// to target (the status line when the target is gone or disabled).
async function finish(message, target) {
  setBusy(false);
  await reload();
  say(message);
  (target && !target.disabled && !target.closest('[hidden]') ? target : $('status')).focus();
}

async function checkout() {
  if (busy || cart.size === 0) return;
  setBusy(true);
  let message;
  let target = $('status');
  cartKey ??= idempotencyKey();
  try {
    const { res, body } = await call('POST', '/api/checkout', cartBody(), { 'Idempotency-Key': cartKey, 'X-Route-Item': routeItem() });
    if (res.ok && Array.isArray(body?.lines)) {
      cart.clear();
      short.clear();
      cartKey = holdKey = null;
      showOrder(body, 'Order');
      message = `Order ${body.order_id} placed: ${describe(body.lines)}.`;
      target = $('order-heading');
    } else {
      if (res.status < 500) cartKey = null; // refused: nothing was sold under the key
      message = `Not bought: ${cartRefusal(body)}`;
      short = shortOf(body);
      target = $('cart-heading');
    }
  } catch {
    message = 'Not known to be bought: the shop cannot be reached (is the server running?). ' +
      'Check out again once it is back: if this cart was sold, its order is shown, never placed twice.';
  }
  await finish(message, target);
}

// ---- The hold ----

async function placeHold() {
  if (busy || cart.size === 0) return;
  setBusy(true);
  let message;
  let target = $('status');
  const ttl = $('hold-ttl').value;
  if (holdKey?.ttl !== ttl) holdKey = { key: idempotencyKey(), ttl };
  try {
    const { res, body } = await call('POST', '/api/holds', { ...cartBody(), ttl }, { 'Idempotency-Key': holdKey.key, 'X-Route-Item': routeItem() });
    if (res.ok && body?.id && body.status !== 'active') {
      // The hold placed under this key before its answer was lost has ended since (it ran
      // out while the shop could not be reached): the cart stays, and a new key holds it anew.
      holdKey = null;
      message = `Hold ${body.id}, placed before the shop could answer, is ${body.status} now. Hold the cart again to set it aside.`;
      target = $('hold');
    } else if (res.ok && body?.id) {
      cart.clear();
      short.clear();
      cartKey = holdKey = null;
      showHold(body, res);
      message = `Hold ${body.id} placed: ${describe(body.lines)} set aside for you. Confirm it before the time runs out.`;
      target = $('confirm');
    } else {
      if (res.status < 500) holdKey = null; // refused: nothing was set aside under the key
      message = `Not held: ${cartRefusal(body)}`;
      short = shortOf(body);
      target = $('cart-heading');
    }
  } catch {
    message = 'Not known to be held: the shop cannot be reached (is the server running?). ' +
      'Hold again once it is back: if this cart was held, that hold is shown, never set aside twice.';
  }
  await finish(message, target);
}

// serverLeft is the time a hold has left, in ms, by the server's clock: expires_at minus the
// server's time of the answer (its now field, else its Date header), never the laptop's clock.
function serverLeft(h, res) {
  const expires = Date.parse(h.expires_at);
  const now = Date.parse(h.now) || Date.parse(res?.headers.get('Date'));
  return Number.isFinite(expires) && Number.isFinite(now) ? expires - now : NaN;
}

function showHold(h, res) {
  stopTimer();
  // warned: the last minute was announced (only a hold placed with more than a minute left).
  hold = { id: h.id, lines: h.lines, deadline: 0, timer: 0, ended: false, warned: !(serverLeft(h, res) > 60e3) };
  $('hold-heading').textContent = `Hold ${h.id}`;
  $('hold-lines').innerHTML = h.lines.map((l) => `<li>${l.quantity} × ${esc(nameOf(l.item_id))}</li>`).join('');
  $('hold-box').hidden = false;
  $('hold-box').classList.remove('expired');
  $('confirm').hidden = $('cancel').hidden = false;
  $('order-box').hidden = true;
  countFrom(serverLeft(h, res));
}

// countFrom starts the countdown of left ms, counted on the page's monotonic clock from now.
function countFrom(left) {
  stopTimer();
  if (!Number.isFinite(left)) {
    $('countdown').textContent = 'unknown (the server gave no time)';
    return;
  }
  hold.deadline = performance.now() + left;
  hold.timer = setInterval(tick, 250);
  tick();
}

function stopTimer() {
  if (hold?.timer) clearInterval(hold.timer);
  if (hold) hold.timer = 0;
}

function tick() {
  const ms = hold.deadline - performance.now();
  if (ms > 0) {
    const s = Math.ceil(ms / 1000);
    $('countdown').textContent = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
    if (s <= 60 && !hold.warned) { // the timer is not read out: the last minute is said once
      hold.warned = true;
      say(`Hold ${hold.id}: one minute left to confirm it.`);
    }
    return;
  }
  stopTimer();
  $('countdown').textContent = '0:00';
  checkHold(hold.id).catch(() => {}); // checkHold says what it finds; nothing to throw
}

// checkHold asks the server about a hold whose count reached zero: it ends by the database's
// clock, which may be a moment behind this page's count.
async function checkHold(id) {
  let answer;
  try {
    answer = await call('GET', `/api/holds/${id}`);
  } catch {
    if (hold?.id === id) say(`Hold ${id} should have expired; the shop cannot be reached to tell.`);
    return;
  }
  if (hold?.id !== id || hold.ended) return;
  const { res, body } = answer;
  switch (body?.status) {
    case 'active': countFrom(Math.max(serverLeft(body, res), 250)); break;
    case 'expired': holdExpired(`Hold ${id} expired: its units are back on sale, and its lines back in the cart.`); break;
    case 'confirmed': endHold(); say(`Hold ${id} was confirmed (order ${body.order_id}).`); break;
    case 'cancelled': endHold(); say(`Hold ${id} was cancelled.`); break;
    default: say(`Hold ${id}: the shop gave an answer it could not read.`);
  }
}

// endHold hides the hold: it was confirmed or cancelled.
function endHold() {
  stopTimer();
  if (hold) hold.ended = true;
  $('hold-box').hidden = true;
  renderCart();
}

// backToCart puts the lines of the hold back in the cart (its units are back on sale).
function backToCart() {
  for (const l of hold.lines) {
    const id = String(l.item_id);
    cart.set(id, Math.min((cart.get(id) || 0) + l.quantity, maxQuantity));
  }
}

// holdExpired shows the hold as expired and puts its lines back in the cart. Focus leaves
// the hold's buttons (they go) for the cart.
function holdExpired(message) {
  stopTimer();
  const hadFocus = $('hold-box').contains(document.activeElement);
  hold.ended = true;
  backToCart();
  $('countdown').textContent = 'expired';
  $('hold-box').classList.add('expired');
  $('hold-heading').textContent = `Hold ${hold.id} (expired)`;
  $('confirm').hidden = $('cancel').hidden = true;
  renderCart();
  say(message);
  if (hadFocus) $('cart-heading').focus();
}

async function confirmHold() {
  if (busy || !hold || hold.ended) return;
  const id = hold.id;
  setBusy(true);
  let message;
  let target = $('status');
  try {
    const { res, body } = await call('POST', `/api/holds/${id}/confirm`);
    const code = body?.error?.code;
    if (res.ok && Array.isArray(body?.lines)) {
      endHold();
      showOrder(body, 'Order');
      message = `Hold ${id} confirmed: order ${body.order_id} placed: ${describe(body.lines)}.`;
      target = $('order-heading');
    } else if (code === 'hold_expired') {
      setBusy(false);
      holdExpired(`Not confirmed: hold ${id} expired before it was confirmed. Its units are back on sale, and its lines back in the cart.`);
      $('cart-heading').focus(); // with the message, not after the catalogue's reload
      await reload();
      return;
    } else if (code === 'hold_not_active' || code === 'not_found') {
      endHold();
      message = `Not confirmed: ${body.error.message}.`;
    } else {
      message = `Not confirmed: ${cartRefusal(body)}`;
      target = $('confirm');
    }
  } catch {
    message = `Not confirmed: ${unreachable}`;
    target = $('confirm');
  }
  await finish(message, target);
}

async function cancelHold() {
  if (busy || !hold || hold.ended) return;
  const id = hold.id;
  setBusy(true);
  let message;
  let target = $('cancel');
  try {
    const { res, body } = await call('DELETE', `/api/holds/${id}`);
    if (res.status === 204) {
      backToCart();
      endHold();
      message = `Hold ${id} cancelled: its units are back on sale, and its lines back in the cart.`;
      target = $('cart-heading');
    } else if (body?.error?.code === 'hold_not_active') {
      endHold();
      message = `Not cancelled: ${body.error.message}.`;
      target = $('status');
    } else {
      message = `Not cancelled: ${cartRefusal(body)}`;
    }
  } catch {
    message = `Not cancelled: ${unreachable}`;
  }
  await finish(message, target);
}

// run runs an event's work and says, in words, anything it did not expect: no error is left
// uncaught.
function run(work) {
  Promise.resolve().then(work).catch((err) => {
    setBusy(false);
    say(`Something went wrong on this page: ${err?.message || err}. Reload it to start again.`);
  });
}

$('items').addEventListener('click', (e) => {
  const b = e.target.closest('button');
  if (b?.dataset.id) run(() => buy(b.dataset.id, b));
  else if (b?.dataset.add) run(() => addToCart(b.dataset.add, b));
});
// Enter in a quantity field adds to the cart, as the button next to it does; focus stays in
// the field.
$('items').addEventListener('keydown', (e) => {
  if (e.key !== 'Enter' || !e.target.id?.startsWith('qty-')) return;
  e.preventDefault();
  const field = e.target;
  run(() => addToCart(field.id.slice(4), field));
});
$('cart-lines').addEventListener('click', (e) => {
  const b = e.target.closest('button[data-remove]');
  if (b) run(() => removeLine(b.dataset.remove));
});
$('checkout').addEventListener('click', () => run(checkout));
$('hold').addEventListener('click', () => run(placeHold));
$('confirm').addEventListener('click', () => run(confirmHold));
$('cancel').addEventListener('click', () => run(cancelHold));
load().catch((err) => say(`Could not load the items: ${err instanceof TypeError ? unreachable : err.message}`));
