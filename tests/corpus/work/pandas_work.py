# pandas: read a CSV, group, join, sort and write it back.
import sys

import pandas as pd

df = pd.read_csv(sys.argv[1], names=["id", "key", "grp", "val"])
g = df.groupby("grp").agg(n=("id", "size"), s=("val", "sum"), m=("val", "max"))
j = df.merge(g, left_on="grp", right_index=True)
j["r"] = j["val"] - j["s"] // j["n"]
j = j.sort_values(["key", "r", "id"], kind="mergesort")
j.to_csv("joined.csv", index=False)
print(len(df), len(g), int(g["s"].sum()), df["key"].nunique())
