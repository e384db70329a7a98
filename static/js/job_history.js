// The job page's watermark chart in the watermark's own units: the committed item id (int,
// file_set), the source time (datetime) or one line per key (key_value).
(function () {
  const node = document.getElementById("history-data");
  const canvas = document.getElementById("history");
  if (!node || !canvas || typeof Chart === "undefined") return;
  const data = JSON.parse(node.textContent || "{}");
  const points = data.points || [];
  if (!points.length) return;
  const labels = points.map((p) => p.at.replace("T", " ").slice(0, 19));
  let datasets;
  let yTicks = {};
  if (data.type === "key_value") {
    datasets = data.keys.map((key) => ({
      label: key, data: points.map((p) => (p.keys && key in p.keys ? p.keys[key] : null)),
      stepped: true, pointRadius: 2, spanGaps: true,
    }));
  } else if (data.type === "datetime") {
    datasets = [{ label: "source time committed", stepped: true, pointRadius: 2,
                  data: points.map((p) => (p.time ? Date.parse(p.time) : null)) }];
    yTicks = { callback: (v) => new Date(v).toISOString().replace("T", " ").slice(0, 16) };
  } else {
    datasets = [{ label: "next item id (committed prefix)", stepped: true, pointRadius: 2,
                  data: points.map((p) => p.position) }];
  }
  new Chart(canvas, {
    type: "line",
    data: { labels: labels, datasets: datasets },
    options: { animation: false, scales: { x: { ticks: { maxTicksLimit: 8 } }, y: { ticks: yTicks } } },
  });
})();
