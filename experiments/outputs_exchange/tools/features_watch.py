"""Ten thesis-width nodes sharing features (seed 0), the divergence watch off: the loss and accuracies every 25
steps for 300 steps, to see whether the run the watch stopped at step 20 recovers. From the repository root:

    cd results/outputs_exchange/thesis_h100 && python features_watch.py > features_watch.txt

Columns: step, mean loss over the nodes, node average and collective (negentropy) test accuracy (%).
"""
from jaxcomm import network, recipes

recipe = recipes.thesis()
dataset = recipe.load()
config = recipe.network(10, "features", eval_every=25, steps=300)
out = network.train_network(config, recipe.model(dataset.num_classes), dataset, divergence=None, progress=False)
for record in out["history"]:
    print(record["step"], round(record["loss"], 2), round(record["avg_accuracy"], 1),
          round(record["collective_accuracy"]["negentropy"], 1))
