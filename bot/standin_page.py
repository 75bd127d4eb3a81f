"""The stand-in's face: one page that plays Slack for one workspace (no build step).

It renders what the bot sent (Block Kit: header, section mrkdwn, context,
actions with primary / danger buttons and confirm dialogs, overflow menus,
divider, inputs; modals with inline errors; ephemerals; the Home tab) and
turns clicks into the same signed requests Slack sends, through the
stand-in's /ui endpoints.
"""

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Signoff demo · local Slack</title>
<style>
  :root { --ink:#1d1c1d; --muted:#616061; --line:#e2e2e2; --green:#007a5a; --red:#e01e5a; --bg:#fff; }
  * { box-sizing: border-box; }
  body { margin:0; font: 15px/1.46 -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color:var(--ink); background:#f8f8f8; }
  header.top { position:sticky; top:0; z-index:5; display:flex; gap:8px; align-items:center; flex-wrap:wrap;
               padding:8px 12px; background:#3f0e40; color:#fff; }
  header.top h1 { font-size:16px; margin:0 8px 0 0; }
  header.top select, header.top button { font:inherit; border-radius:6px; border:0; padding:4px 8px; }
  .tabs button.active { background:#fff; color:#3f0e40; font-weight:700; }
  main { max-width: 860px; margin: 0 auto; padding: 12px; }
  .composer { background:#fff; border:1px solid var(--line); border-radius:8px; padding:8px; margin-bottom:12px; }
  .composer textarea, .reply textarea { width:100%; min-height:44px; font:inherit; border:1px solid var(--line); border-radius:6px; padding:6px; }
  .suggestions { display:flex; flex-wrap:wrap; gap:6px; margin:6px 0; }
  .suggestions button { font-size:13px; border:1px solid var(--line); background:#fff; border-radius:12px; padding:2px 10px; cursor:pointer; }
  .msg { background:var(--bg); border:1px solid var(--line); border-radius:8px; padding:8px 10px; margin:8px 0; }
  .msg .who { font-weight:700; } .msg .who small { color:var(--muted); font-weight:400; margin-left:6px; }
  .thread { margin:6px 0 0 14px; padding-left:10px; border-left:3px solid var(--line); }
  .thread .msg { margin:6px 0; }
  .ephemeral { background:#fdf6e3; } .ephemeral .tag { color:var(--muted); font-size:12px; }
  .blk { margin:4px 0; overflow-wrap:anywhere; }
  .blk.header { font-size:17px; font-weight:800; }
  .blk.context { color:var(--muted); font-size:13px; }
  .blk.section { display:flex; gap:8px; align-items:flex-start; justify-content:space-between; }
  .blk.actions { display:flex; flex-wrap:wrap; gap:6px; }
  hr.blk { border:0; border-top:1px solid var(--line); }
  button.bk { font:inherit; font-size:14px; font-weight:700; padding:6px 12px; min-height:36px; border-radius:6px;
              border:1px solid #bbb; background:#fff; cursor:pointer; }
  button.bk.primary { background:var(--green); border-color:var(--green); color:#fff; }
  button.bk.danger { background:#fff; border-color:var(--red); color:var(--red); }
  code { background:#f4f4f4; border:1px solid #e8e8e8; border-radius:3px; padding:0 3px; color:#c01343; font-size:13px; }
  pre { background:#f4f4f4; border:1px solid #e8e8e8; border-radius:4px; padding:6px; white-space:pre-wrap; font-size:13px; }
  .mention { background:#e8f5fa; color:#1264a3; border-radius:3px; padding:0 2px; }
  .overlay { position:fixed; inset:0; background:rgba(0,0,0,.45); display:flex; align-items:center; justify-content:center; z-index:20; }
  .dialog { background:#fff; border-radius:10px; width:min(560px, 94vw); max-height:88vh; overflow:auto; padding:14px; }
  .dialog h2 { margin:0 0 8px; font-size:18px; }
  .dialog .buttons { display:flex; justify-content:flex-end; gap:8px; margin-top:10px; }
  .input label { font-weight:700; display:block; margin-top:8px; }
  .input textarea, .input input { width:100%; font:inherit; border:1px solid #bbb; border-radius:6px; padding:6px; }
  .input .hint { color:var(--muted); font-size:12px; }
  .input .error { color:var(--red); font-size:13px; }
  .home { background:#fff; border:1px solid var(--line); border-radius:8px; padding:10px; }
  select.overflow { font:inherit; }
</style>
</head>
<body>
<header class="top">
  <h1>#approvals</h1>
  <label>You are
    <select id="user" aria-label="act as">
      <option value="U0RILEY">Riley (requester)</option>
      <option value="U0ALICE">Alice (approver)</option>
      <option value="U0BOB">Bob (not an approver)</option>
    </select>
  </label>
  <span class="tabs"><button id="tab-channel" class="active">Channel</button> <button id="tab-home">Home</button></span>
</header>
<main>
  <div id="channel-view">
    <div class="composer">
      <textarea id="compose" placeholder="@signoff refund order 1235 for 5000"></textarea>
      <div class="suggestions" id="suggestions"></div>
      <button class="bk primary" id="send">Send to @signoff</button>
    </div>
    <div id="messages"></div>
  </div>
  <div id="home-view" class="home" hidden></div>
</main>
<div id="modal"></div>
<script>
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
</script>
</body>
</html>
"""
