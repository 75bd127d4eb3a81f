const SUGGESTIONS = [
  'Email finance@acme.com "Q3 numbers are in"',
  'Refund order 1234 for 500',
  'Refund order 1235 for 5000',
  'Write "Launch on Monday" to /plans/launch.md',
  'In /plans/launch.md replace "Monday" with "Tuesday"',
  'Delete /reports/old.pdf and email team@acme.com that the old report is gone',
  'Ask the bookkeeper to refund order 77 for 2500',
  'Deploy checkout to staging',
];
const NAMES = {U0ALICE:'Alice', U0RILEY:'Riley', U0BOB:'Bob', U0DANA:'Dana', U0SIGNOFF:'signoff'};
const GROUPS = {S0FINANCE:'finance', S0SECURITY:'security'};
let state = null, tab = 'channel', openView = null, viewErrors = {}, viewValues = {};
let channel = 'C0APPROVALS', expanded = new Set(), focusTs = null, scrollToFocus = false;
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
  t = t.replace(/<!subteam\^([A-Z0-9]+)(\|[^>]*)?>/g, (m, id) => '<span class="mention">@' + (GROUPS[id] || id) + '</span>');
  t = t.replace(/<#([A-Z0-9]+)(\|[^>]*)?>/g, (m, id) => '<span class="mention">#' + ((state && state.channels[id]) || id.toLowerCase()) + '</span>');
  t = t.replace(/<!date\^(\d+)\^[^|>]*\|([^>]*)>/g, (m, ts) => new Date(Number(ts) * 1000).toLocaleString());
  t = t.replace(/<(https?:[^|>]+)\|([^>]+)>/g, (m, url, label) => url.startsWith(location.origin + '/archives/')
    ? '<a href="' + url + '" data-permalink="1">' + label + '</a>' : '<a href="' + url + '" target="_blank" rel="noopener">' + label + '</a>');
  t = t.replace(/<(https?:[^>]+)>/g, '<a href="$1" target="_blank" rel="noopener">$1</a>');
  t = t.replace(/(^|[\s(])\*([^*\n]+)\*(?=$|[\s).,:;!?])/g, '$1<b>$2</b>');
  t = t.replace(/(^|[\s(])_([^_\n]+)_(?=$|[\s).,:;!?])/g, '$1<i>$2</i>');
  t = t.replace(/(^|[\s(])~([^~\n]+)~(?=$|[\s).,:;!?])/g, '$1<s>$2</s>');
  // a line that starts with ">" is a quote (an agent's own ">" arrives escaped, as &gt;)
  t = t.replace(/(^|\n)>([^\n]*)/g, '$1<span class="quote">$2</span>');
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
    if (el.url) { if (el.url.startsWith(location.origin + '/archives/')) { goTo(el.url); return; } window.open(el.url, '_blank'); }
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
function link(url, label) {
  if (!/^https?:\/\//.test(url || '')) return plain({text: label});
  const href = url.replace(/"/g, '%22');
  return href.startsWith(location.origin + '/archives/')
    ? '<a href="' + href + '" data-permalink="1">' + plain({text: label}) + '</a>'
    : '<a href="' + href + '" target="_blank" rel="noopener">' + plain({text: label}) + '</a>';
}
function inline(s) {  // a rich_text part's elements: text as written (never parsed), links as links
  return (s.elements || []).map(e => e.type === 'link' ? link(e.url, e.text || e.url) : plain({text: e.text || ''})).join('');
}
function rich(r) {  // rich_text: sections, quotes and preformatted text (a diff: its lines as written)
  return ((r && r.elements) || []).map(s =>
    s.type === 'rich_text_preformatted' ? '<pre class="rich-pre">' + inline(s) + '</pre>'
    : s.type === 'rich_text_quote' ? '<span class="quote">' + inline(s).replace(/\n/g, '<br>') + '</span>'
    : s.type === 'rich_text_list' ? '<ul class="rich-list">' + (s.elements || []).map(i => '<li>' + inline(i) + '</li>').join('') + '</ul>'
    : inline(s).replace(/\n/g, '<br>')).join('<br>');
}
const TASK_MARKS = {pending: '○', in_progress: '◔', complete: '✓', error: '✕'};
function task(t) {
  const li = document.createElement('li');
  li.className = 'task ' + (t.status || 'pending');
  li.dataset.taskId = t.task_id;
  li.innerHTML = '<span class="mark">' + (TASK_MARKS[t.status] || '○') + '</span> <span class="title">' + plain({text: t.title}) + '</span>' +
    (t.details ? '<div class="details">' + rich(t.details) + '</div>' : '') +
    (t.output ? '<div class="output">' + rich(t.output) + '</div>' : '');
  return li;
}
function plan(b) {
  const box = document.createElement('div');
  box.innerHTML = '<div class="plan-title">' + plain({text: b.title}) + '</div>';
  const list = document.createElement('ul');
  (b.tasks || []).forEach(t => list.appendChild(task(t)));
  box.appendChild(list);
  return box;
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
      else if (b.type === 'plan') node.appendChild(plan(b));
      else if (b.type === 'task_card') { const l = document.createElement('ul'); l.appendChild(task(b)); node.appendChild(l); }
      else if (b.type === 'rich_text') node.innerHTML = rich(b);
      else if (b.type === 'actions') b.elements.forEach(e => node.appendChild(element(e, msg)));
      else if (b.type === 'input') {
        node.className = 'input';
        node.innerHTML = '<label>' + plain(b.label) + (b.optional ? ' <small>(optional)</small>' : '') + '</label>';
        node.appendChild(inputField(b, typed));
        if (b.hint) node.insertAdjacentHTML('beforeend', '<div class="hint">' + plain(b.hint) + '</div>');
        if (errors && errors[b.block_id]) node.insertAdjacentHTML('beforeend', '<div class="error" role="alert">' + plain({text: errors[b.block_id]}) + '</div>');
      }
    }
    node.classList.add('blk', b.type);
    box.appendChild(node);
  }
  return box;
}

// An input block's element, as Slack's client draws it; `fieldValue` reads it back as Slack sends it.
function inputField(b, typed) {
  const el = b.element, kind = el.type, had = typed && b.block_id in typed ? typed[b.block_id] : undefined;
  let field;
  if (kind === 'static_select' || kind === 'multi_static_select') {
    field = document.createElement('select');
    field.multiple = kind === 'multi_static_select';
    if (!field.multiple) field.add(new Option('Select an item', ''));
    const chosen = had !== undefined ? [].concat(had || []) :
      (el.initial_options || (el.initial_option ? [el.initial_option] : [])).map(o => o.value);
    for (const o of el.options || []) field.add(new Option(plain(o.text), o.value, false, chosen.includes(o.value)));
  } else if (kind === 'radio_buttons') {
    field = document.createElement('div'); field.className = 'radios'; field.setAttribute('role', 'radiogroup');
    const chosen = had !== undefined ? had : (el.initial_option ? el.initial_option.value : null);
    for (const o of el.options || []) {
      const label = document.createElement('label'), radio = document.createElement('input');
      radio.type = 'radio'; radio.name = b.block_id; radio.value = o.value; radio.checked = o.value === chosen;
      label.appendChild(radio); label.append(' ' + plain(o.text)); field.appendChild(label);
    }
  } else if (el.multiline) {
    field = document.createElement('textarea'); field.rows = 4;
    field.value = had !== undefined ? had : (el.initial_value || '');
  } else {
    field = document.createElement('input');
    field.type = {email_text_input: 'email', url_text_input: 'url', number_input: 'number', datepicker: 'date',
                  datetimepicker: 'datetime-local'}[kind] || 'text';
    if (kind === 'number_input') {
      field.step = el.is_decimal_allowed ? 'any' : '1';
      if (el.min_value !== undefined) field.min = el.min_value;
      if (el.max_value !== undefined) field.max = el.max_value;
    }
    let value = had !== undefined ? had : (kind === 'datepicker' ? el.initial_date :
      kind === 'datetimepicker' ? el.initial_date_time : el.initial_value);
    if (kind === 'datetimepicker' && value) {  // Unix seconds, shown in the reader's own time
      const at = new Date(value * 1000);
      value = new Date(at.getTime() - at.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
    }
    field.value = value || '';
  }
  field.dataset.blockId = b.block_id; field.dataset.kind = kind;
  if (field.tagName !== 'DIV') field.name = b.block_id;
  field.setAttribute('aria-label', plain(b.label));
  return field;
}

function fieldValue(f) {
  const kind = f.dataset.kind;
  if (kind === 'multi_static_select') return [...f.selectedOptions].map(o => o.value);
  if (kind === 'static_select') return f.value || null;
  if (kind === 'radio_buttons') { const on = f.querySelector('input:checked'); return on ? on.value : null; }
  if (kind === 'datepicker') return f.value || null;
  if (kind === 'datetimepicker') return f.value ? Math.floor(new Date(f.value).getTime() / 1000) : null;
  return f.value;
}

function message(m, ephemeral) {
  const d = document.createElement('div');
  d.className = 'msg' + (ephemeral ? ' ephemeral' : '') + (m.ts && m.ts === focusTs ? ' focused' : '');
  d.dataset.ts = m.ts || '';
  d.dataset.kind = m.kind || '';
  const name = NAMES[m.user] || m.user || 'signoff';
  d.innerHTML = '<div class="who">' + name + (m.user === 'U0SIGNOFF' || !m.user ? ' <small>APP</small>' : '') +
                (ephemeral ? ' <span class="tag">Only visible to you</span>' : '') +
                (m.broadcast ? ' <span class="tag">replied to a thread</span>' : '') + '</div>';
  if (m.html !== null && m.html !== undefined) {  // a streamed message: its Markdown, as it grows
    const t = document.createElement('div'); t.className = 'text streamed'; t.innerHTML = m.html;
    if (m.streaming) t.insertAdjacentHTML('beforeend', '<span class="typing">▍</span>');
    d.appendChild(t);
    if (m.blocks && m.blocks.length) d.appendChild(blocks(m.blocks, m));
  } else if (m.blocks && m.blocks.length) d.appendChild(blocks(m.blocks, m));
  else { const t = document.createElement('div'); t.className = 'text'; t.innerHTML = mrkdwn(m.text); d.appendChild(t); }
  return d;
}

function render() {
  if (!state) return;
  const box = $('messages');
  const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  box.innerHTML = '';
  document.querySelectorAll('.channels button').forEach(b => b.classList.toggle('active', b.dataset.channel === channel));
  const direct = channel.startsWith('D');  // the Messages tab: the app's DM, its agent threads
  // Slack's agent view: the tab is a DM with a composer, each message its own thread, the suggested
  // prompts at its top; an install with the assistant view: a chat per thread, prompts in it
  const agentView = direct && state.experience === 'agent';
  $('channel-name').textContent = direct ? 'Messages · signoff' : '#' + (state.channels[channel] || channel);
  document.querySelector('#channel-view .composer').hidden = direct && !agentView;  // (a chat: its own Reply box)
  if (agentView && state.tab_prompts.length) {
    const offered = document.createElement('div'); offered.className = 'suggestions prompts tab-prompts';
    for (const p of state.tab_prompts) {
      const b = document.createElement('button'); b.textContent = p.title;
      b.onclick = async () => { await post('/ui/say', {user:user(), channel, text:p.message}); refresh(); };
      offered.appendChild(b);
    }
    box.appendChild(offered);
  }
  const newest = state.messages.length ? state.messages[state.messages.length - 1].ts : null;
  for (const root of state.messages) {
    const wrap = document.createElement('section');
    wrap.className = 'conversation';
    wrap.dataset.ts = root.ts;
    wrap.appendChild(message(root));
    if (root.broadcast) { box.appendChild(wrap); continue; }
    const replies = state.threads[root.ts] || [];
    const mine = state.ephemerals.filter(e => (e.thread_ts || '') === root.ts || replies.some(r => r.ts === e.thread_ts));
    const open = direct || expanded.has(root.ts);
    if (replies.length && !direct) {  // (an agent thread is shown open, as Slack's side panel is)
      const fold = document.createElement('button');
      fold.className = 'replies'; fold.dataset.root = root.ts;
      fold.textContent = open ? 'Hide replies' : replies.length + (replies.length === 1 ? ' reply' : ' replies');
      fold.onclick = () => { open ? expanded.delete(root.ts) : expanded.add(root.ts); render(); };
      wrap.appendChild(fold);
    }
    if ((replies.length && open) || mine.length || direct) {
      const t = document.createElement('div'); t.className = 'thread';
      if (open) replies.forEach(r => t.appendChild(message(r)));
      mine.forEach(e => t.appendChild(message(e, true)));
      if (direct && state.statuses[root.ts]) {
        t.insertAdjacentHTML('beforeend', '<div class="session" role="status">signoff ' + plain({text: state.statuses[root.ts]}) + '</div>');
      }
      if (direct && state.prompts[root.ts] && !replies.length && root.ts === newest) {
        const offered = document.createElement('div'); offered.className = 'suggestions prompts';
        for (const p of state.prompts[root.ts]) {
          const b = document.createElement('button'); b.textContent = p.title;
          b.onclick = async () => { await post('/ui/say', {user:user(), channel, text:p.message, thread_ts:root.ts}); refresh(); };
          offered.appendChild(b);
        }
        t.appendChild(offered);
      }
      if (open) {
        const reply = document.createElement('div'); reply.className = 'reply';
        reply.innerHTML = '<textarea placeholder="Reply in thread…" aria-label="reply"></textarea><button class="bk">Reply</button>';
        reply.querySelector('button').onclick = async () => {
          const text = reply.querySelector('textarea').value.trim();
          if (text) { await post('/ui/say', {user:user(), channel, text, thread_ts:root.ts}); refresh(); }
        };
        t.appendChild(reply);
      }
      wrap.appendChild(t);
    }
    box.appendChild(wrap);
  }
  const loose = state.ephemerals.filter(e => !e.thread_ts);
  loose.forEach(e => box.appendChild(message(e, true)));
  renderNotifications();
  if (tab === 'home') {
    $('home-view').innerHTML = '';
    $('home-view').appendChild(state.home ? blocks(state.home.blocks, {}) : document.createTextNode('Loading…'));
  }
  renderModal();
  const focused = scrollToFocus && document.querySelector('.msg.focused');
  if (focused) { focused.scrollIntoView({block: 'center'}); scrollToFocus = false; }  // once; the highlight stays
  else if (atBottom && !focusTs) window.scrollTo(0, document.body.scrollHeight);
}

// What this person has seen: the badge counts the rest, and opening the list clears it, as
// Slack's Activity does (the items stay, each showing its message's text as it is now).
function readKey() { return 'signoff-read:' + user(); }
function readSet() { try { return new Set(JSON.parse(localStorage.getItem(readKey()) || '[]')); } catch (e) { return new Set(); } }
function markRead() {
  localStorage.setItem(readKey(), JSON.stringify(state.notifications.map(n => n.ts)));
  renderNotifications();
}

function renderNotifications() {
  const list = state.notifications.slice().reverse();
  const read = readSet();
  const unread = list.filter(n => !read.has(n.ts)).length;
  $('bell').textContent = unread ? '🔔 ' + unread : '🔔';
  $('bell').setAttribute('aria-label', unread + ' unread notifications, ' + list.length + ' in all');
  const panel = $('notifications');
  panel.innerHTML = list.length ? '' : '<p class="empty">No notifications.</p>';
  for (const n of list) {
    const item = document.createElement('button');
    item.className = 'notification' + (read.has(n.ts) ? '' : ' unread');
    item.innerHTML = '<small>#' + n.channel_name + '</small> ' + mrkdwn(n.text);
    item.onclick = () => { panel.hidden = true; show(n.channel, n.root, n.ts); };
    panel.appendChild(item);
  }
}

function show(where, root, ts) {
  if (state.channels[where]) channel = where;
  if (root && root !== ts) expanded.add(root);
  focusTs = ts; scrollToFocus = true; showTab('channel');
  refresh();
}

function goTo(url) {
  const m = /\/archives\/([A-Z0-9]+)\/p(\d+)/.exec(url);
  if (!m) return;
  const ts = m[2].slice(0, -6) + '.' + m[2].slice(-6);
  history.pushState(null, '', url);
  const all = Object.values(state.threads).flat().concat(state.messages);
  const found = all.find(x => x.ts === ts);
  show(m[1], found && found.thread_ts ? found.thread_ts : ts, ts);
}

function renderModal() {
  const views = state.views;
  const current = views.length ? views[views.length - 1] : null;
  const box = $('modal');
  if (!current) { box.innerHTML = ''; openView = null; return; }
  // keep what is being typed, until the bot changes the view (views.update gives it a new hash)
  if (openView && openView.id === current.id && openView.hash === current.hash && box.innerHTML) return;
  openView = current;
  box.innerHTML = '';
  const overlay = document.createElement('div'); overlay.className = 'overlay';
  const dialog = document.createElement('div'); dialog.className = 'dialog'; dialog.setAttribute('role', 'dialog');
  dialog.innerHTML = '<h2>' + plain(current.title) + '</h2>';
  dialog.appendChild(blocks(current.blocks, {view: current}, viewErrors[current.id], viewValues[current.id]));
  const buttons = document.createElement('div'); buttons.className = 'buttons';
  const close = document.createElement('button'); close.className = 'bk'; close.textContent = current.close ? current.close.text : 'Close';
  close.onclick = async () => { await post('/ui/close', {user:user(), view_id:current.id}); openView = null; refresh(); };
  buttons.appendChild(close);
  if (current.submit) {
    const submit = document.createElement('button'); submit.className = 'bk primary'; submit.textContent = current.submit.text;
    submit.onclick = async () => {
      const values = {};
      dialog.querySelectorAll('[data-block-id]').forEach(f => values[f.dataset.blockId] = fieldValue(f));
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
  // The blocks this screen shows go with the click: a card changed meanwhile is clicked as shown.
  if (msg.view) await post('/ui/click', {user:user(), view_id:msg.view.id, view:msg.view, action_id:actionId, selected});
  else if (msg.ephemeral) await post('/ui/click', {user:user(), channel:msg.channel, ts:msg.ts, action_id:actionId, ephemeral:true});
  else await post('/ui/click', {user:user(), channel:msg.channel, ts:msg.ts, action_id:actionId, selected, blocks:msg.blocks});
  refresh();
}

let lastSeen = '';
async function refresh() {
  const r = await fetch('/ui/state?user=' + encodeURIComponent(user()) + '&channel=' + channel);
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
  // "/signoff …" is the slash command, as Slack's composer sends it; anything else talks to @signoff
  // (in the app's DM, the Messages tab, a message is for the app as it is)
  const said = channel.startsWith('D') || text.startsWith('@signoff') || text.startsWith('/signoff') ? text : '@signoff ' + text;
  await post('/ui/say', {user:user(), channel, text: said});
  refresh();
};
for (const s of SUGGESTIONS) {
  const b = document.createElement('button'); b.textContent = s;  // (the app's DM needs no mention)
  b.onclick = () => { $('compose').value = (channel.startsWith('D') ? '' : '@signoff ') + s; };
  $('suggestions').appendChild(b);
}
function showTab(name) {
  tab = name;
  $('channel-view').hidden = name === 'home'; $('home-view').hidden = name !== 'home';
  ['channel', 'messages', 'home'].forEach(t => $('tab-' + t).classList.toggle('active', t === name));
  lastSeen = '';
}
$('user').onchange = async () => {
  openView = null; lastSeen = '';
  if (tab === 'messages') { channel = 'D' + user(); await post('/ui/messages-tab', {user:user()}); }
  refresh(); if (tab === 'home') post('/ui/home', {user:user()});
};
$('tab-channel').onclick = () => {
  if (channel.startsWith('D')) channel = 'C0APPROVALS';
  showTab('channel'); refresh();
};
$('tab-messages').onclick = async () => {  // as Slack's: app_home_opened (or, assistant view, a new chat)
  channel = 'D' + user(); focusTs = null; showTab('messages');
  await post('/ui/messages-tab', {user:user()}); setTimeout(refresh, 300);
};
$('tab-home').onclick = async () => { showTab('home'); await post('/ui/home', {user:user()}); setTimeout(refresh, 300); };
document.addEventListener('click', (e) => {
  const a = e.target.closest && e.target.closest('a[data-permalink]');
  if (a) { e.preventDefault(); goTo(a.href); }
});
document.querySelectorAll('.channels button').forEach(b => b.onclick = () => {
  channel = b.dataset.channel; focusTs = null; if (tab !== 'channel') showTab('channel'); lastSeen = ''; refresh();
});
$('bell').onclick = (e) => {
  e.stopPropagation();
  $('notifications').hidden = !$('notifications').hidden;
  if (!$('notifications').hidden) setTimeout(markRead, 1500);  // seen once the list has shown
};
// The list closes as Slack's does: Escape, or a tap anywhere else (on a phone it covers the header).
document.addEventListener('keydown', e => { if (e.key === 'Escape') $('notifications').hidden = true; });
document.addEventListener('click', e => {
  if (!$('notifications').hidden && !$('notifications').contains(e.target)) $('notifications').hidden = true;
});
// Changes are pushed (server-sent events): the page asks for the state only when something changed.
new EventSource('/ui/events').addEventListener('change', refresh);
refresh().then(() => { if (location.pathname.startsWith('/archives/')) goTo(location.href); });
