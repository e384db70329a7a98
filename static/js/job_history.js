// The job page's watermark chart in the watermark's own units: the committed item id (int,
// file_set), the source time (datetime) or one line per key (key_value), on a time axis: each
// point at the moment the watermark moved, spaced by the time between them.
(function () {
  const node = document.getElementById("history-data");
  const canvas = document.getElementById("history");
  if (!node || !canvas || typeof Chart === "undefined") return;
  const data = JSON.parse(node.textContent || "{}");
  const points = data.points || [];
  if (!points.length) return;
  const pad = (n) => String(n).padStart(2, "0");
  // the pages' date format (local time); the seconds only when the chart spans less than a day
  const stamp = (ms, seconds) => {
    const d = new Date(ms);
    const day = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
    const time = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
    return seconds ? `${time}:${pad(d.getSeconds())}` : `${day} ${time}`;
  };
  const at = points.map((p) => Date.parse(p.at));
  const span = at[at.length - 1] - at[0];
  const series = (value) => points.map((p, i) => ({ x: at[i], y: value(p) }));
  let datasets;
  let yTicks = { precision: 0 }; // item ids and key positions are whole numbers
  if (data.type === "key_value") {
    datasets = data.keys.map((key) => ({
      label: key, stepped: true, pointRadius: 2, spanGaps: true,
      data: series((p) => (p.keys && key in p.keys ? p.keys[key] : null)),
    }));
  } else if (data.type === "datetime") {
    datasets = [{ label: "source time committed", stepped: true, pointRadius: 2,
                  data: series((p) => (p.time ? Date.parse(p.time) : null)) }];
    yTicks = { callback: (v) => stamp(v, false) };
  } else {
    datasets = [{ label: "next item id (committed prefix)", stepped: true, pointRadius: 2,
                  data: series((p) => p.position) }];
  }
  const narrow = canvas.parentElement.clientWidth < 600;
  new Chart(canvas, {
    type: "line",
    data: { datasets: datasets },
    options: {
      animation: false,
      parsing: false,
      scales: {
        x: {
          type: "linear",
          min: at[0],
          max: span > 0 ? at[at.length - 1] : at[0] + 60000,
          ticks: { maxTicksLimit: narrow ? 3 : 7, maxRotation: 0,
                   callback: (v) => stamp(v, span < 86400000) },
        },
        y: { ticks: { ...yTicks, maxTicksLimit: 6 } },
      },
      plugins: { tooltip: { callbacks: { title: (items) => stamp(items[0].parsed.x, true) } } },
    },
  });
})();
