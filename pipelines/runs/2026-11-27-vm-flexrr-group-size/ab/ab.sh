for rep in 1 2 3; do for seed in 1 2 3; do for gs in 8 4; do for which in old new; do
  bin=/work/main/target/release/forestall; [ $which = old ] && bin=/work/ab-old/target/release/forestall
  rm -rf /tmp/ab-$which; $bin run /work/main/pipelines/quickstart.toml --workers 16 --policy forestall --pattern slow-worker --set straggler.probability=0.1 --set straggler.delay_percent=400 --set workers.pace_ns_per_row=25000 --set policy.group_size=$gs --iterations 20 --seed $seed --out /tmp/ab-$which >/dev/null 2>&1
  python3 -c "
import json;d=json.load(open('/tmp/ab-$which/summary.json'));print('$which',$gs,$seed,$rep,round(d['iteration_s']/d['bound_iteration_s'],3), round(d['iteration_s']/d['ideal_iteration_s'],3))"
done; done; done; done
