const SUGGESTIONS = [
  'Email finance@acme.com "Q3 numbers are in"',
  'Refund order 1234 for 500',
  'Refund order 1235 for 5000',
  'Write "Launch on Monday" to /plans/launch.md',
  'Delete /reports/old.pdf and email team@acme.com that the old report is gone',
  'Ask the bookkeeper to refund order 77 for 2500',
];
const NAMES = {U0ALICE:'Alice', U0RILEY:'Riley', U0BOB:'Bob', U0SIGNOFF:'signoff'};
let state = null, tab = 'channel', openView = null, viewErrors = {}, viewValues = {};
const $ = (id) => document.getElementById(id);
const user = () => $('user').value;

async function post(path, body) {
  const r = await fetch(path, {method:'POST', headers:{'Content-Type':'application/json'}, body:JSON.stringify(body)});
  return r.json();
}

function mrkdwn(text) {
  let t = String(text || '');
  t = t.replace(/[\u0000-\u0008]/g, '');
  const pres = [];
  t = t.replace(/```([\s\S]*?)```/g, (m, code) => { pres.push(code); return '\u0001' + (pres.length - 1) + '\u0001'; });
  const codes = [];
  t = t.replace(/`([^`\n]+)`/g, (m, code) => { codes.push(code); return '\u0002' + (codes.length - 1) + '\u0002'; });
  t = t.replace(/"/g, '&quot;');
  t = t.replace(/<@([A-Z0-9]+)(\|[^>]*)?>/g, (m, id) => '<span class="mention">@' + (NAMES[id] || id) + '</span>');
  t = t.replace(/<#([A-Z0-9]+)(\|[^>]*)?>/g, (m, id) => '<span class="mention">#' + id.toLowerCase() + '</span>');
  t = t.replace(/<!date\^(\d+)\^[^|>]*\|([^>]*)>/g, (m, ts) => new Date(Number(ts) * 1000).toLocaleString());
  t = t.replace(/<(https?:[^|>]+)\|([^>]+)>/g, '<a href="$1" target="_blank" rel="noopener">$2</a>');
  t = t.replace(/<(https?:[^>]+)>/g, '<a href="$1" target="_blank" rel="noopener">$1</a>');
  t = t.replace(/(^|[\s(])\*([^*\n]+)\*(?=$|[\s).,:;!?])/g, '$1<b>$2</b>');
  t = t.replace(/(^|[\s(])_([^_\n]+)_(?=$|[\s).,:;!?])/g, '$1<i>$2</i>');
  t = t.replace(/(^|[\s(])~([^~\n]+)~(?=$|[\s).,:;!?])/g, '$1<s>$2</s>');
  t = t.replace(/\n/g, '<br>');
  t = t.replace(/\u0002(\d+)\u0002/g, (m, i) => '<code>' + codes[i] + '</code>');
  t = t.replace(/\u0001(\d+)\u0001/g, (m, i) => '<pre>' + pres[i].replace(/^\n/, '') + '</pre>');
  return t;
}
function plain(obj) { const d = document.createElement('span'); d.textContent = (obj && obj.text) || ''; return d.innerHTML; }
function textOf(obj) { return !obj ? '' : (obj.type === 'mrkdwn' ? mrkdwn(obj.text) : plain(obj)); }

function button(el, msg) {
  const b = document.createElement('button');
  b.className = 'bk' + (el.style ? ' ' + el.style : '');
  b.textContent = el.text.text;
  b.dataset.actionId = el.action_id;
  b.onclick = async () => {
    if (el.url) { window.open(el.url, '_blank'); }
    if (el.confirm && !(await confirmDialog(el.confirm))) return;
    await act(msg, el.action_id);
  };
  return b;
}
function overflow(el, msg) {
  const s = document.createElement('select');
  s.className = 'overflow'; s.dataset.actionId = el.action_id;
  s.innerHTML = '<option value="">⋯</option>' + el.options.map(o => '<option value="' + o.value + '">' + plain(o.text) + '</option>').join('');
  s.onchange = () => s.value && act(msg, el.action_id, s.value);
  return s;
}
function element(el, msg) { return el.type === 'overflow' ? overflow(el, msg) : button(el, msg); }

function blocks(list, msg, errors, typed) {
  const box = document.createElement('div');
  for (const b of list || []) {
    let node;
    if (b.type === 'divider') { node = document.createElement('hr'); }
    else {
      node = document.createElement('div');
      if (b.type === 'header') node.innerHTML = plain(b.text);
      else if (b.type === 'section') {
        const t = document.createElement('div'); t.innerHTML = textOf(b.text); node.appendChild(t);
        if (b.accessory) node.appendChild(element(b.accessory, msg));
      } else if (b.type === 'context') node.innerHTML = b.elements.map(textOf).join(' ');
      else if (b.type === 'actions') b.elements.forEach(e => node.appendChild(element(e, msg)));
      else if (b.type === 'input') {
        node.className = 'input';
        const el = b.element, multi = el.multiline;
        node.innerHTML = '<label>' + plain(b.label) + (b.optional ? ' <small>(optional)</small>' : '') + '</label>';
        const field = document.createElement(multi ? 'textarea' : 'input');
        field.value = typed && b.block_id in typed ? typed[b.block_id] : (el.initial_value || '');
        field.name = b.block_id; field.dataset.blockId = b.block_id;
        if (multi) field.rows = 4;
        node.appendChild(field);
        if (b.hint) node.insertAdjacentHTML('beforeend', '<div class="hint">' + plain(b.hint) + '</div>');
        if (errors && errors[b.block_id]) node.insertAdjacentHTML('beforeend', '<div class="error" role="alert">' + plain({text: errors[b.block_id]}) + '</div>');
      }
    }
    node.classList.add('blk', b.type);
    box.appendChild(node);
  }
  return box;
}

function message(m, ephemeral) {
  const d = document.createElement('div');
  d.className = 'msg' + (ephemeral ? ' ephemeral' : '');
  d.dataset.ts = m.ts || '';
  d.dataset.kind = m.kind || '';
  const name = NAMES[m.user] || m.user || 'signoff';
  d.innerHTML = '<div class="who">' + name + (m.user === 'U0SIGNOFF' || !m.user ? ' <small>APP</small>' : '') +
                (ephemeral ? ' <span class="tag">Only visible to you</span>' : '') + '</div>';
  if (m.blocks && m.blocks.length) d.appendChild(blocks(m.blocks, m));
  else { const t = document.createElement('div'); t.className = 'text'; t.innerHTML = mrkdwn(m.text); d.appendChild(t); }
  return d;
}

function render() {
  if (!state) return;
  const box = $('messages'); box.innerHTML = '';
  for (const root of state.messages.slice().reverse()) {
    const wrap = document.createElement('section');
    wrap.className = 'conversation';
    wrap.appendChild(message(root));
    const replies = state.threads[root.ts] || [];
    const mine = state.ephemerals.filter(e => (e.thread_ts || '') === root.ts || replies.some(r => r.ts === e.thread_ts));
    if (replies.length || mine.length) {
      const t = document.createElement('div'); t.className = 'thread';
      replies.forEach(r => t.appendChild(message(r)));
      mine.forEach(e => t.appendChild(message(e, true)));
      const reply = document.createElement('div'); reply.className = 'reply';
      reply.innerHTML = '<textarea placeholder="Reply in thread…" aria-label="reply"></textarea><button class="bk">Reply</button>';
      reply.querySelector('button').onclick = async () => {
        const text = reply.querySelector('textarea').value.trim();
        if (text) { await post('/ui/say', {user:user(), text, thread_ts:root.ts}); refresh(); }
      };
      t.appendChild(reply);
      wrap.appendChild(t);
    }
    box.appendChild(wrap);
  }
  const loose = state.ephemerals.filter(e => !e.thread_ts);
  loose.forEach(e => box.prepend(message(e, true)));
  if (tab === 'home') {
    $('home-view').innerHTML = '';
    $('home-view').appendChild(state.home ? blocks(state.home.blocks, {}) : document.createTextNode('Loading…'));
  }
  renderModal();
}

function renderModal() {
  const views = state.views;
  const current = views.length ? views[views.length - 1] : null;
  const box = $('modal');
  if (!current) { box.innerHTML = ''; openView = null; return; }
  if (openView && openView.id === current.id && box.innerHTML) return;  // keep what is being typed
  openView = current;
  box.innerHTML = '';
  const overlay = document.createElement('div'); overlay.className = 'overlay';
  const dialog = document.createElement('div'); dialog.className = 'dialog'; dialog.setAttribute('role', 'dialog');
  dialog.innerHTML = '<h2>' + plain(current.title) + '</h2>';
  dialog.appendChild(blocks(current.blocks, {}, viewErrors[current.id], viewValues[current.id]));
  const buttons = document.createElement('div'); buttons.className = 'buttons';
  const close = document.createElement('button'); close.className = 'bk'; close.textContent = current.close ? current.close.text : 'Close';
  close.onclick = async () => { await post('/ui/close', {user:user(), view_id:current.id}); openView = null; refresh(); };
  buttons.appendChild(close);
  if (current.submit) {
    const submit = document.createElement('button'); submit.className = 'bk primary'; submit.textContent = current.submit.text;
    submit.onclick = async () => {
      const values = {};
      dialog.querySelectorAll('[data-block-id]').forEach(f => values[f.dataset.blockId] = f.value);
      viewValues[current.id] = values;  // Slack keeps what was typed when it shows errors
      const reply = await post('/ui/submit', {user:user(), view_id:current.id, values});
      viewErrors[current.id] = reply.response_action === 'errors' ? reply.errors : null;
      openView = null; box.innerHTML = ''; lastSeen = ''; refresh();
    };
    buttons.appendChild(submit);
  }
  dialog.appendChild(buttons); overlay.appendChild(dialog); box.appendChild(overlay);
}

function confirmDialog(c) {
  return new Promise(resolve => {
    const box = document.createElement('div'); box.className = 'overlay';
    box.innerHTML = '<div class="dialog" role="alertdialog"><h2>' + plain(c.title) + '</h2><div>' + textOf(c.text) +
      '</div><div class="buttons"><button class="bk deny">' + plain(c.deny) + '</button><button class="bk primary confirm">' + plain(c.confirm) + '</button></div></div>';
    box.querySelector('.deny').onclick = () => { box.remove(); resolve(false); };
    box.querySelector('.confirm').onclick = () => { box.remove(); resolve(true); };
    document.body.appendChild(box);
  });
}

async function act(msg, actionId, selected) {
  await post('/ui/click', {user:user(), channel:msg.channel, ts:msg.ts, action_id:actionId, selected});
  refresh();
}

let lastSeen = '';
async function refresh() {
  const r = await fetch('/ui/state?user=' + encodeURIComponent(user()));
  const text = await r.text();
  if (text === lastSeen) return;  // nothing new: leave the page (and the button under the pointer) alone
  lastSeen = text;
  state = JSON.parse(text);
  render();
}

$('send').onclick = async () => {
  const text = $('compose').value.trim();
  if (!text) return;
  $('compose').value = '';
  await post('/ui/say', {user:user(), text: text.startsWith('@signoff') ? text : '@signoff ' + text});
  refresh();
};
for (const s of SUGGESTIONS) {
  const b = document.createElement('button'); b.textContent = s; b.onclick = () => { $('compose').value = '@signoff ' + s; };
  $('suggestions').appendChild(b);
}
$('user').onchange = () => { openView = null; lastSeen = ''; refresh(); if (tab === 'home') post('/ui/home', {user:user()}); };
$('tab-channel').onclick = () => { tab = 'channel'; $('channel-view').hidden = false; $('home-view').hidden = true;
  $('tab-channel').classList.add('active'); $('tab-home').classList.remove('active'); lastSeen = ''; refresh(); };
$('tab-home').onclick = async () => { tab = 'home'; $('channel-view').hidden = true; $('home-view').hidden = false;
  $('tab-home').classList.add('active'); $('tab-channel').classList.remove('active');
  lastSeen = ''; await post('/ui/home', {user:user()}); setTimeout(refresh, 300); };
refresh();
setInterval(refresh, 700);
